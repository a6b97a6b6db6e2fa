"""slack-notifier: posts the message in /workdir/inputs to a Slack incoming webhook.

`--dry-run` prints the request instead of sending it. Standard library only, no
subprocess or fork.
"""
import json
import os
import sys
import urllib.request

WEBHOOK = "https://hooks.slack.com/services/T000/B000"
INPUTS = os.environ.get("NOTIFIER_INPUTS", "/workdir/inputs")


def load_message(path):
    if os.path.isdir(path):
        path = os.path.join(path, "message.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main(argv):
    message = load_message(INPUTS)
    payload = json.dumps({"text": message.get("text", "")}).encode()
    if "--dry-run" in argv:
        print(f"would post {len(payload)} bytes to {WEBHOOK}: {payload.decode()}")
        return 0
    req = urllib.request.Request(WEBHOOK, data=payload, method="POST",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            print(f"posted: HTTP {resp.status}")
    except OSError as e:
        print(f"post failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
