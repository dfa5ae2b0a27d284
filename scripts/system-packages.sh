#!/bin/sh
# Print the Debian packages of scripts/system-packages.txt, one per line: the app's (default),
# or the app's and the test suite's with --test. Read by scripts/setup.sh and the Dockerfile.
# POSIX sh and awk only: it runs in the Docker image before anything else is installed.
set -eu
list="$(dirname "$0")/system-packages.txt"
with_test=0
[ "${1:-}" = "--test" ] && with_test=1
awk -v with_test="$with_test" '
  { sub(/#.*/, ""); gsub(/^[ \t]+|[ \t]+$/, "") }
  $0 == "" { next }
  $0 == "[test]" { in_test = 1; next }
  /^\[/ { print "unknown section " $0 " in " FILENAME > "/dev/stderr"; exit 1 }
  NF != 1 { print "one package per line in " FILENAME ", not: " $0 > "/dev/stderr"; exit 1 }
  !in_test || with_test == 1 { print }
' "$list"
