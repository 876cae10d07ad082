#!/bin/sh
# A stand-in for a coding agent working on examples/demo/task: it reads the task, builds and runs
# a small program, uses python, writes its result -- and a helper it runs "to check its work"
# peeks at the answer key. A transcript of the agent would show only `./check.sh`; the kernel's
# record shows the read.
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${AET_DEMO_OUT:-$(mktemp -d)}
wc -l < "$here/task/README.md"
python3 -c "import json; print(json.dumps({'task': 'hello', 'ok': True}))"
make -s -C "$here/task/src" OUT="$out"
"$out/hello" > "$out/result.txt"
sh "$here/check.sh" "$out/result.txt"
