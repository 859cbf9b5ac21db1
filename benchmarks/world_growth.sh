#!/usr/bin/env bash
# world_growth: what grows with a job's world size under mpirun, at 2, 4, 8 and 16 processes of
# one device each (or the sizes given), oversubscribed on this machine's cores. JSON lines, one
# per world size:
#   job_seconds        — the whole `mpirun` of a tiny train_gpt (100 steps, --checkpoint_dir off):
#                        start-up, MPI's wiring, compiling, training, closing
#   step_ms            — its step time (process 0's, from its closing line)
#   rss_max_bytes, rss_mean_bytes — each process's peak resident memory (/usr/bin/time's %M),
#                        the largest and the mean
#   shm_peak_bytes     — /dev/shm's peak use during the job (the shared windows' touched pages;
#                        each process reserves AXLE_SHARED_MEMORY_MB, 128 MiB by default, capped
#                        at half its share of what /dev/shm has free)
#   meeting_us         — one in-graph all_reduce of 4 KiB among the replicas (collectives_bench
#                        --mpi --per_step 1: a step's whole cost is its one meeting), with
#                        mpi_allreduce_us, raw MPI_Allreduce of the same size in the same run, and
#                        allreduce_1mib_us / mpi_allreduce_1mib_us for 1 MiB
# Usage: benchmarks/world_growth.sh [BUILD_DIR] [SIZES...]   (default: build 2 4 8 16)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(2 4 8 16)
BIN=$BUILD/bin
for tool in "$BIN/train_gpt" "$BIN/collectives_bench" /usr/bin/time; do
  [ -x "$tool" ] || { echo "world_growth: $tool is missing (./axle.sh build; apt-get install time)" >&2; exit 2; }
done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x CPU_NUM_DEVICES=1)
TINY=(--n_layer 1 --n_embd 32 --n_head 2 --block_size 32 --batch_size 2 --seed 1 --max_steps 100
      --eval_interval 0 --log_steps 0 --num_devices 1)

shm_used() { df --output=used -B1 /dev/shm | tail -1 | tr -d ' '; }

# The value of "key" in a JSON line.
field() { sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p" <<<"$2" | head -1; }
# The value of `metric` for `size` in collectives_bench's lines.
bench_value() { grep "\"metric\":\"$1\"" <<<"$3" | grep "\"bytes\":$2," | sed -n 's/.*"value":\([0-9.eE+-]*\).*/\1/p'; }

for n in "${SIZES[@]}"; do
  rm -f "$WORK"/rss.*
  baseline=$(shm_used)
  peak=$baseline
  (while :; do shm_used; sleep 0.02; done) >"$WORK/shm" &
  sampler=$!
  start=$(date +%s.%N)
  line=$("${MPIRUN[@]}" -np "$n" sh -c \
    'exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"' "$WORK" \
    "$BIN/train_gpt" "${TINY[@]}" 2>/dev/null | grep '^{' | tail -1)
  end=$(date +%s.%N)
  kill "$sampler"; wait "$sampler" 2>/dev/null || true
  while read -r used; do [ "$used" -gt "$peak" ] && peak=$used; done <"$WORK/shm"
  rss=$(cat "$WORK"/rss.* | awk '{ s += $1; if ($1 > m) m = $1 } END { printf "%d %d", m * 1024, s * 1024 / NR }')
  meet=$("${MPIRUN[@]}" -np "$n" "$BIN/collectives_bench" --mpi --quick --bytes 4096,1048576 \
    --per_step 1 2>/dev/null | grep '^{')
  printf '{"bench":"world_growth","processes":%d,"devices_per_process":1,"world_size":%d,' "$n" "$n"
  printf '"job_seconds":%.3f,"step_ms":%s,"rss_max_bytes":%s,"rss_mean_bytes":%s,' \
    "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" "$(field step_ms "$line")" ${rss}
  printf '"shm_peak_bytes":%d,"meeting_us":%s,"mpi_allreduce_us":%s,' "$((peak - baseline))" \
    "$(bench_value allreduce_us 4096 "$meet")" "$(bench_value mpi_allreduce_us 4096 "$meet")"
  printf '"allreduce_1mib_us":%s,"mpi_allreduce_1mib_us":%s}\n' \
    "$(bench_value allreduce_us 1048576 "$meet")" "$(bench_value mpi_allreduce_us 1048576 "$meet")"
done
