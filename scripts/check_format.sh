#!/usr/bin/env bash
# Checks, without changing anything, that every tracked .cpp/.h file under app/ src/ include/
# runtime/ python/ tests/ bench/ is formatted as .clang-format says; lists the files that are not
# and exits 1 if any. With --fix, formats them in place instead (clang-format -i).
#   ./scripts/check_format.sh                  # check every tracked file
#   ./scripts/check_format.sh --fix            # format every tracked file in place
#   ./scripts/check_format.sh [--fix] FILE...  # only these files
# The tree is formatted with clang-format 14 (Debian 12's `clang-format` package, which
# scripts/setup.sh installs); another major version may format some lines differently.
# Exit codes: 0 all formatted (or fixed), 1 files to format, 2 usage or clang-format missing.
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
if [ "${1:-}" = "--fix" ]; then
  fix=1
  shift
fi
case "${1:-}" in
  -h | --help)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  -*)
    echo "check_format: unknown option $1 (usage: scripts/check_format.sh [--fix] [FILE...])" >&2
    exit 2
    ;;
esac

clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check_format: $clang_format not found; install it with ./scripts/setup.sh --full" \
    "(or: sudo apt-get install clang-format)" >&2
  exit 2
fi
version=$("$clang_format" --version)
major=$(sed -n 's/.*version \([0-9]*\).*/\1/p' <<<"$version")
if [ "$major" != "14" ]; then
  echo "check_format: note: $version; the tree is formatted with clang-format 14," \
    "so some lines may differ" >&2
fi

files=()
if [ $# -gt 0 ]; then
  files=("$@")
else
  if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "check_format: not a git checkout: name the files to check" >&2
    exit 2
  fi
  # Tracked files that are still there (a tracked file deleted in the work tree is skipped).
  while IFS= read -r -d '' f; do
    [ -f "$f" ] && files+=("$f")
  done < <(git ls-files -z -- 'app/*.cpp' 'app/*.h' 'src/*.cpp' 'src/*.h' 'include/*.cpp' 'include/*.h' \
    'runtime/*.cpp' 'runtime/*.h' 'python/*.cpp' 'python/*.h' 'tests/*.cpp' 'tests/*.h' \
    'bench/*.cpp' 'bench/*.h')
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "check_format: no files to check" >&2
  exit 0
fi

jobs=2  # the machine's cores are shared
if [ $fix -eq 1 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -P "$jobs" -n 16 "$clang_format" --style=file -i
  echo "check_format: formatted ${#files[@]} file(s) in place; review with git diff"
  exit 0
fi

# Per file: "BAD path" when it is not formatted, "ERR path: message" when clang-format failed
# on it (unreadable, a bad .clang-format).
# shellcheck disable=SC2016
results=$(printf '%s\0' "${files[@]}" | xargs -0 -P "$jobs" -n 16 sh -c '
  for f do
    out=$("$0" --style=file --dry-run --Werror --ferror-limit=1 "$f" 2>&1 >/dev/null) && continue
    case $out in
      *"code should be clang-formatted"*) printf "BAD %s\n" "$f" ;;
      *) printf "ERR %s: %s\n" "$f" "$(printf "%s" "$out" | head -n 3 | tr "\n" " ")" ;;
    esac
  done' "$clang_format")
bad=$(sed -n 's/^BAD //p' <<<"$results" | sort)
errors=$(sed -n 's/^ERR //p' <<<"$results" | sort)
if [ -n "$errors" ]; then
  echo "check_format: clang-format failed on:" >&2
  # shellcheck disable=SC2001
  sed 's/^/  /' <<<"$errors" >&2
  exit 2
fi
if [ -n "$bad" ]; then
  n=$(wc -l <<<"$bad")
  echo "check_format: $n of ${#files[@]} file(s) not formatted as .clang-format says:" >&2
  # shellcheck disable=SC2001
  sed 's/^/  /' <<<"$bad" >&2
  echo "fix: ./scripts/check_format.sh --fix   (or: clang-format -i FILE...; see a file's changes with" \
    "clang-format FILE | diff FILE -)" >&2
  exit 1
fi
echo "check_format: ${#files[@]} file(s) formatted"
