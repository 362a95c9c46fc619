# bench_lib.sh: measuring on a shared machine, for the benchmarks (sourced).
# Needs WORK (a scratch folder), PY (python), QUIET_WAIT, QUIET_PCT, TRIES, BUDGET
# and t_start (the benchmark's start, in SECONDS) set by the caller.

# machine-wide CPU busy % over one second, from /proc/stat
busy_pct() {
  local c u n s i w q sq st rest t1 i1 t2 i2
  read -r c u n s i w q sq st rest </proc/stat
  t1=$((u + n + s + i + w + q + sq + st)) i1=$((i + w))
  sleep 1
  read -r c u n s i w q sq st rest </proc/stat
  t2=$((u + n + s + i + w + q + sq + st)) i2=$((i + w))
  echo $((100 * ((t2 - t1) - (i2 - i1)) / (t2 - t1 > 0 ? t2 - t1 : 1)))
}

# wait_quiet: wait up to QUIET_WAIT s for the machine to be idle; sets BUSY (last %)
wait_quiet() {
  local t0=$SECONDS
  BUSY=$(busy_pct)
  while [ "$BUSY" -gt "$QUIET_PCT" ] && [ $((SECONDS - t0)) -lt "$QUIET_WAIT" ]; do
    BUSY=$(busy_pct)
  done
}

# mark: machine-wide busy and total jiffies (MB, MT) and the CPU time of this shell's
# reaped descendants in jiffies (MC; `times` runs in this shell, not a subshell)
HZ=$(getconf CLK_TCK)
mark() {
  local c u n s i w q sq st rest
  read -r c u n s i w q sq st rest </proc/stat
  MB=$((u + n + s + q + sq)) MT=$((u + n + s + i + w + q + sq + st))
  times >"$WORK/times"
  MC=$(awk -v hz="$HZ" 'NR == 2 {t = 0; for (k = 1; k <= 2; k++) {split($k, a, /[ms]/); t += a[1] * 60 + a[2]}; print int(t * hz + 0.5)}' "$WORK/times")
}

# measured OUT CMD ARGS...: wait for a quiet machine, run CMD OUT.tN ARGS... (CMD writes
# its results to OUT.tN, or to paths that begin so) and measure FOREIGN, the % of the
# machine's CPU that other processes used meanwhile. If that is above QUIET_PCT, wait
# and run again, up to TRIES runs in all; the least disturbed run's results are then
# moved to OUT (OUT.tN.x to OUT.x) and its FOREIGN kept, also in FOREIGNS for the footer.
FOREIGNS=()
measured() {
  local out=$1 cmd=$2 try tries=$TRIES best=0 bestf=101 mb mt mc f
  shift 2
  if [ $((SECONDS - t_start)) -gt "$BUDGET" ]; then # past the budget: no more waiting
    tries=1
    [ -z "${over_budget:-}" ] && echo "  (over the ${BUDGET}s budget: no more waiting for quiet or repeating runs)" >&2
    over_budget=1
  fi
  for try in $(seq 1 "$tries"); do
    [ -z "${over_budget:-}" ] && wait_quiet
    mark; mb=$MB mt=$MT mc=$MC
    "$cmd" "$out.t$try" "$@" || return 1
    mark
    FOREIGN=$(awk -v b=$((MB - mb)) -v t=$((MT - mt)) -v c=$((MC - mc)) \
      'BEGIN {f = t > 0 ? 100 * (b - c) / t : 0; printf "%d", f < 0 ? 0 : f + 0.5}')
    if [ "$FOREIGN" -lt "$bestf" ]; then best=$try bestf=$FOREIGN; fi
    [ "$FOREIGN" -le "$QUIET_PCT" ] && break
    if [ "$try" -lt "$tries" ]; then
      echo "  (other processes used ${FOREIGN}% of the machine during that run; running it again)" >&2
    else
      echo "  warning: other processes used ${bestf}% of the machine during the least disturbed of $tries run(s); figures are low and noisy" >&2
    fi
  done
  for f in "$out.t$best"*; do mv "$f" "$out${f#"$out.t$best"}"; done
  FOREIGN=$bestf
  FOREIGNS+=("$FOREIGN")
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

json() { # json FILE EXPR: EXPR evaluated on the parsed JSON object d of FILE
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

