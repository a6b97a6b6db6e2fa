"""hello-report: summarises JSON records from /workdir/inputs into /workdir/out/report.md.

Standard library only, no subprocess or fork: it runs inside a Comet that forbids both.
"""
import json
import os
import sys

INPUTS = os.environ.get("HELLO_INPUTS", "/workdir/inputs")
OUT = os.environ.get("HELLO_OUT", "/workdir/out")


def load_records(path):
    """Returns the records of every .json file under `path` (a file or a directory)."""
    files = []
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            if name.endswith(".json"):
                files.append(os.path.join(path, name))
    elif os.path.isfile(path):
        files.append(path)
    records = []
    for name in files:
        with open(name, encoding="utf-8") as f:
            data = json.load(f)
        records.extend(data if isinstance(data, list) else [data])
    return records


def main():
    records = load_records(INPUTS)
    lines = ["# Report", "", f"{len(records)} record(s)", ""]
    for r in records:
        title = r.get("title", "(untitled)") if isinstance(r, dict) else str(r)
        lines.append(f"- {title}")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"summary: {len(records)} record(s) written to {OUT}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
