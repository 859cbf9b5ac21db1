#!/usr/bin/env bash
# axle's driver: deps, build, test, demo, bench. `./axle.sh help` lists the commands.
set -euo pipefail
CALLER_DIR=$(pwd)  # a relative install prefix is the caller's
cd "$(dirname "$0")"
ROOT=$(pwd)

# Every Debian package the build, the tests, the benchmarks and the samples need.
PACKAGES=(
  cmake ninja-build g++ make pkg-config
  libasio-dev libconcurrentqueue-dev libeigen3-dev
  libprotobuf-dev protobuf-compiler libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev nlohmann-json3-dev libcli11-dev
  openmpi-bin libopenmpi-dev iproute2
  dataset-fashion-mnist fortunes
  # benchmarks/world_growth.sh: each process's peak memory.
  time
  # ./axle.sh docs and the test that every public name is documented.
  doxygen
  # The fuzz targets (./axle.sh fuzz): clang with libFuzzer's runtime. Debian 12's default
  # clang (14) has no std::source_location, which axle's headers use.
  clang-16 libclang-rt-16-dev
)

JOBS=${AXLE_JOBS:-$(nproc)}

usage() {
  cat <<USAGE
usage: ./axle.sh COMMAND [ARGS]
  deps                    install every Debian package axle needs (apt-get; idempotent)
  build [--sanitize=K]    configure and build into build/ (build-K/ for a sanitizer K)
  test  [--sanitize=K] [CTEST ARGS]
                          deps + build when needed, then the whole suite through CTest
                          (K = thread or address)
  demo [FLAGS]            deps + build of the library and train_mnist when needed, then train
                          the MNIST MLP for one epoch (FLAGS go to build/bin/train_mnist,
                          e.g. --model cnn)
  docs                    deps + configure when needed, then the API reference from the public
                          headers with Doxygen into build/docs/html/
  bench [NAME...]         run the benchmarks (all, or e.g. 'actor'), JSON lines on stdout
  fuzz [SECONDS] [TARGET...]
                          build the parsers' libFuzzer targets with clang, ASan and UBSan into
                          build-fuzz/ and run each (or the named ones: idx, safetensors,
                          checkpoint, sharded_checkpoint, persistent_cache, event_file,
                          step_commit) for SECONDS
                          (default 60); \`test\` runs each for a few seconds
  install [PREFIX]        deps + build when needed, then install axle's headers (PREFIX/include/axle),
                          libraries, CMake package (find_package(axle)) and pkg-config file (axle.pc)
                          into PREFIX (default /usr/local; through sudo when not writable)
USAGE
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  echo "${missing[@]:-}"
}

cmd_deps() {
  echo "axle: installing Debian packages" >&2
  as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q "${PACKAGES[@]}"
}

ensure_deps() {
  local missing
  missing=$(missing_packages)
  if [ -n "$missing" ]; then
    echo "axle: missing packages: $missing" >&2
    cmd_deps
  fi
}

# Parses --sanitize=K out of the arguments; sets SANITIZE and REST.
parse_sanitize() {
  SANITIZE=""
  REST=()
  for a in "$@"; do
    case "$a" in
      --sanitize=*) SANITIZE=${a#--sanitize=} ;;
      *) REST+=("$a") ;;
    esac
  done
  case "$SANITIZE" in
    ""|thread|address) ;;
    *) echo "axle: --sanitize must be thread or address, not '$SANITIZE'" >&2; exit 2 ;;
  esac
}

build_dir() {
  if [ -n "$1" ]; then echo "$ROOT/build-$1"; else echo "$ROOT/build"; fi
}

# Configures the build directory for sanitizer $1 (none: build/) once.
configure() {
  ensure_deps
  local dir
  dir=$(build_dir "$1")
  local build_type=Release
  [ -n "$1" ] && build_type=RelWithDebInfo
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=$build_type -DAXLE_SANITIZE="$1"
  fi
}

cmd_build() {
  parse_sanitize "$@"
  configure "$SANITIZE"
  cmake --build "$(build_dir "$SANITIZE")" -j "$JOBS"
}

FUZZ_DIR="$ROOT/build-fuzz"
FUZZ_CXX=clang++-16

# Configures (once) and builds the fuzz targets: only the parsers' sources, instrumented.
build_fuzz() {
  ensure_deps
  if [ ! -f "$FUZZ_DIR/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$FUZZ_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER="$FUZZ_CXX" -DAXLE_FUZZ=ON
  fi
  cmake --build "$FUZZ_DIR" -j "$JOBS"
}

cmd_fuzz() {
  local seconds=60
  if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
  build_fuzz
  local names=("$@")
  if [ ${#names[@]} -eq 0 ]; then
    for exe in "$FUZZ_DIR"/bin/*_fuzz; do names+=("$(basename "${exe%_fuzz}")"); done
  fi
  local failed=()
  for n in "${names[@]}"; do
    if [ ! -x "$FUZZ_DIR/bin/${n}_fuzz" ]; then
      echo "axle: no fuzz target '$n' (have: $(cd "$FUZZ_DIR/bin" && ls *_fuzz | sed 's/_fuzz//' | tr '\n' ' '))" >&2
      exit 2
    fi
    echo "axle: fuzzing $n for ${seconds}s" >&2
    cmake -DFUZZER="$FUZZ_DIR/bin/${n}_fuzz" -DNAME="$n" -DSECONDS="$seconds" \
      -DSEEDS="$ROOT/tests/fuzz/$n" -DWORK="$FUZZ_DIR" -P "$ROOT/tests/fuzz/run_fuzzer.cmake" ||
      failed+=("$n")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "axle: fuzz targets failed: ${failed[*]} (inputs in $FUZZ_DIR/crashes/)" >&2
    exit 1
  fi
}

cmd_test() {
  parse_sanitize "$@"
  local ctest_args=("${REST[@]}")
  cmd_build ${SANITIZE:+--sanitize=$SANITIZE}
  local dir
  dir=$(build_dir "$SANITIZE")
  if [ "$SANITIZE" = thread ]; then
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/tests/tsan.supp ${TSAN_OPTIONS:-}"
  fi
  # The fuzz targets, a few seconds each (label fuzz), before the suite so that the suite's
  # summary closes the output. A sanitizer run is about the main build: it skips them.
  local fuzz_status=0
  if [ -z "$SANITIZE" ]; then
    build_fuzz
    ctest --test-dir "$FUZZ_DIR" --output-on-failure -j "$JOBS" --timeout 600 "${ctest_args[@]}" ||
      fuzz_status=$?
  fi
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" --timeout 600 "${ctest_args[@]}"
  if [ "$fuzz_status" -ne 0 ]; then
    echo "axle: the fuzz tests failed (above; inputs in $FUZZ_DIR/crashes/)" >&2
    exit "$fuzz_status"
  fi
}

cmd_demo() {
  # Only the library and the sample it runs: the tests and benchmarks wait for `test` or `build`.
  configure ""
  cmake --build "$ROOT/build" -j "$JOBS" --target train_mnist
  # One epoch of the MLP on Fashion-MNIST (train_mnist falls back to --fake_data without it).
  "$ROOT/build/bin/train_mnist" --model mlp --num_epochs 1 "$@"
}

cmd_docs() {
  # Doxygen over the public headers' `///` comments; needs no compiled code.
  configure ""
  cmake --build "$ROOT/build" --target docs
  echo "axle: the API reference is $ROOT/build/docs/html/index.html" >&2
}

cmd_bench() {
  cmd_build
  local names=("$@")
  if [ ${#names[@]} -eq 0 ]; then
    for exe in "$ROOT"/build/bin/*_bench; do names+=("$(basename "${exe%_bench}")"); done
  fi
  for n in "${names[@]}"; do
    local exe="$ROOT/build/bin/${n%_bench}_bench"
    if [ ! -x "$exe" ]; then
      echo "axle: no benchmark '$n' (have: $(cd "$ROOT/build/bin" && ls *_bench | tr '\n' ' '))" >&2
      exit 2
    fi
    "$exe"
  done
}

cmd_install() {
  if [ $# -gt 1 ]; then
    echo "axle: install takes one PREFIX at most, not: $*" >&2
    exit 2
  fi
  local prefix=${1:-/usr/local}
  case "$prefix" in
    /*) ;;
    *) prefix="$CALLER_DIR/$prefix" ;;
  esac
  cmd_build
  # The nearest existing folder on the way to PREFIX says whether root must install.
  local probe=$prefix
  while [ ! -e "$probe" ]; do probe=$(dirname "$probe"); done
  if [ -w "$probe" ]; then
    cmake --install "$ROOT/build" --prefix "$prefix"
  else
    as_root cmake --install "$ROOT/build" --prefix "$prefix"
  fi
  echo "axle: installed into $prefix (find_package(axle) with CMAKE_PREFIX_PATH=$prefix," \
    "or PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config axle)" >&2
}

case "${1:-help}" in
  deps) shift; cmd_deps "$@" ;;
  build) shift; cmd_build "$@" ;;
  test) shift; cmd_test "$@" ;;
  demo) shift; cmd_demo "$@" ;;
  bench) shift; cmd_bench "$@" ;;
  docs) shift; cmd_docs "$@" ;;
  fuzz) shift; cmd_fuzz "$@" ;;
  install) shift; cmd_install "$@" ;;
  help|-h|--help) usage ;;
  *) echo "axle: unknown command '$1'" >&2; usage >&2; exit 2 ;;
esac
