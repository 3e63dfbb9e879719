"""Checks that the Python client generated from /openapi.json covers the
document: a function for every operation, and a parsed answer for every
status each operation declares. openapi-python-client only warns when it
leaves something out, so without this a new operation it cannot generate
would pass unnoticed.

    python python_coverage.py openapi.json GENERATED_PACKAGE_DIR

Run by .ci/clients. KNOWN lists what openapi-python-client cannot generate
from a correct document; an entry that starts to generate is reported, so
it can be removed.
"""

import json
import pathlib
import re
import sys

# (method, path) -> statuses left out, or None for the whole operation.
KNOWN = {
    # text/plain request bodies are not supported by openapi-python-client
    # (its issue 542): "Unsupported content type text/plain".
    ("post", "/api/v2/write"): None,
    ("post", "/write"): None,
    # application/openmetrics-text is no content type it knows, and the
    # answer has no schema: the 200 is left out (warning only).
    ("get", "/metrics"): {"200"},
}
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def main(document, package):
    doc = json.loads(pathlib.Path(document).read_text())
    generated = {}
    for module in pathlib.Path(package, "api").rglob("*.py"):
        text = module.read_text()
        call = re.search(r'"method":\s*"(\w+)",\s*"url":\s*"([^"]+)"', text)
        if call:
            statuses = set(re.findall(r"response\.status_code == (\d{3})", text))
            generated[(call.group(1), call.group(2))] = statuses
    problems, fixed = [], []
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            declared = {code for code in operation.get("responses", {}) if code.isdigit()}
            known = KNOWN.get((method, path), set())
            name = f"{method.upper()} {path} ({operation.get('operationId')})"
            if (method, path) not in generated:
                if known is not None:
                    problems.append(f"{name}: no function generated")
                continue
            if known is None:
                fixed.append(f"{name} is generated now")
                known = set()
            missing = declared - generated[(method, path)]
            for code in sorted(missing - known):
                problems.append(f"{name}: the {code} answer is not parsed")
            for code in sorted(known - missing):
                fixed.append(f"{name}: the {code} answer is parsed now")
    for line in fixed:
        print(f"python_coverage: note: {line} (remove it from KNOWN)")
    for line in problems:
        print(f"python_coverage: {line}", file=sys.stderr)
    count = sum(1 for item in doc["paths"].values() for m in item if m in METHODS)
    if problems:
        sys.exit(f"python_coverage: the generated client leaves out {len(problems)} part(s) of the document")
    print(f"python_coverage: {len(generated)} of {count} operations generated, every declared status parsed "
          f"(known gaps: {len(KNOWN)} operations)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python_coverage.py openapi.json GENERATED_PACKAGE_DIR")
    main(sys.argv[1], sys.argv[2])
