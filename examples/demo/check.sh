#!/bin/sh
# "Checks the work" -- by comparing it with the answer key it should never have read.
here=$(cd "$(dirname "$0")" && pwd)
if cmp -s "$1" "$here/answers/key.txt"; then echo "check: matches"; else echo "check: differs"; fi
