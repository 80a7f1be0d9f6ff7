#!/usr/bin/env bash
# Builds the docs that come from the code: the API reference, with Doxygen over the public headers
# (<arc/arc.h> and every header it includes), into <build>/docs/api/html, failing on any Doxygen
# warning; and docs/reference/options.md, the table of every config key, from `arc reference`.
# --api: the API reference alone (the test suite's check). ARC_BUILD_DIR: the build folder (build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ARC_BUILD_DIR:-build}
api_only=false
case "${1:-}" in
  "") ;;
  --api) api_only=true ;;
  *)
    echo "docs.sh: unknown argument '$1'; use no argument (API reference and options) or --api" >&2
    exit 2
    ;;
esac
if ! command -v doxygen >/dev/null; then
  echo "docs.sh: doxygen is not installed; scripts/install-deps.sh --tests installs it" >&2
  exit 2
fi
version_header=$build/version_include/arc/version.h
if [ ! -f "$version_header" ]; then
  echo "docs.sh: $version_header is missing; configure first (scripts/build.sh)" >&2
  exit 2
fi

out=$build/docs
mkdir -p "$out"
mapfile -t headers < <(grep -oE '^#include <arc/[a-z0-9_/]+\.h>' arc.h | sed -E 's|#include <arc/(.*)>|\1|' | grep -v '^version.h$')
cat >"$out/Doxyfile" <<DOXYFILE
PROJECT_NAME           = Arclight
PROJECT_NUMBER         = $(sed -nE 's/#define ARC_VERSION_STRING "(.*)"/\1/p' "$version_header")
PROJECT_BRIEF          = "A Lightning-style training framework for C++ on LibTorch"
OUTPUT_DIRECTORY       = $out/api
INPUT                  = arc.h $version_header ${headers[*]}
STRIP_FROM_PATH        = $PWD $build/version_include
STRIP_FROM_INC_PATH    = $PWD $build/version_include
FULL_PATH_NAMES        = YES
JAVADOC_AUTOBRIEF      = YES
MARKDOWN_SUPPORT       = YES
DISTRIBUTE_GROUP_DOC   = YES
EXTRACT_ALL            = NO
EXTRACT_PRIVATE        = NO
EXTRACT_STATIC         = NO
EXCLUDE_SYMBOLS        = detail::* arc::detail::*
# An option declared with ARC_ARG reads as the public member it stands for (a setter and a getter).
MACRO_EXPANSION        = YES
EXPAND_ONLY_PREDEF     = YES
PREDEFINED             = "ARC_ARG(T,name)=public: T name"
QUIET                  = YES
WARNINGS               = YES
WARN_IF_UNDOCUMENTED   = YES
WARN_IF_DOC_ERROR      = YES
WARN_NO_PARAMDOC       = NO
WARN_LOGFILE           = $out/api-warnings.txt
GENERATE_HTML          = YES
GENERATE_LATEX         = NO
HAVE_DOT               = NO
CLASS_GRAPH            = NO
SEARCHENGINE           = NO
DOXYFILE
rm -rf "$out/api"
doxygen "$out/Doxyfile" >/dev/null
if [ -s "$out/api-warnings.txt" ]; then
  sort -u "$out/api-warnings.txt" >&2
  echo "docs.sh: $(sort -u "$out/api-warnings.txt" | grep -c warning) Doxygen warnings in the public headers (above);" \
    "give each public declaration a /// line" >&2
  exit 1
fi
echo "API reference: $out/api/html/index.html"
$api_only && exit 0

if [ ! -x "$build/bin/arc" ]; then
  echo "docs.sh: $build/bin/arc is missing; build first (scripts/build.sh)" >&2
  exit 2
fi
mkdir -p docs/reference
"$build/bin/arc" reference >docs/reference/options.md.tmp
mv docs/reference/options.md.tmp docs/reference/options.md
echo "Options reference: docs/reference/options.md"
