"""issue-summarizer: summarises issues from /workdir/inputs.

Asks the model endpoint declared as the `summarize` tool when an API key is available;
otherwise (as in `soyaos pack test`) prints an extractive summary. Standard library only,
no subprocess or fork.
"""
import json
import os
import sys
import urllib.request

ENDPOINT = "https://api.anthropic.com/v1/messages"
INPUTS = os.environ.get("ISSUES_INPUTS", "/workdir/inputs")


def load_issues(path):
    if os.path.isdir(path):
        path = os.path.join(path, "issues.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def ask_model(issues, key):
    prompt = "Summarize these issues in three sentences:\n" + json.dumps(issues)
    body = json.dumps({
        "model": "claude-3-5-haiku-latest",
        "max_tokens": 300,
        "messages": [{"role": "user", "content": prompt}],
    }).encode()
    req = urllib.request.Request(ENDPOINT, data=body, method="POST", headers={
        "content-type": "application/json",
        "x-api-key": key,
        "anthropic-version": "2023-06-01",
    })
    with urllib.request.urlopen(req, timeout=30) as resp:
        reply = json.load(resp)
    return "".join(part.get("text", "") for part in reply.get("content", []))


def extractive(issues):
    titles = [i.get("title", "?") for i in issues]
    return f"{len(issues)} issue(s): " + "; ".join(titles)


def main():
    issues = load_issues(INPUTS)
    key = os.environ.get("ANTHROPIC_API_KEY")
    text = None
    if key:
        try:
            text = ask_model(issues, key)
        except OSError as e:  # network refused, timeout, HTTP error
            print(f"model unavailable ({e}); falling back", file=sys.stderr)
    print("summary: " + (text or extractive(issues)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
