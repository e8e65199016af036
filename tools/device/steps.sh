# What the device scripts share, sourced after they set OUT, STEPS and BUDGET_S: T0, the summary file $S, and
#   has NAME            whether STEPS names the step
#   lim SECONDS         SECONDS, cut to what is left of BUDGET_S (at least 5)
#   run NAME SECONDS LOG COMMAND...   COMMAND under timeout, its output in LOG, exit status and time in the summary
T0=$(date +%s)
S=$OUT/summary.txt; : > "$S"
has() { [[ " $STEPS " == *" $1 "* ]]; }
lim() { local l=$(( T0 + BUDGET_S - 10 - $(date +%s) )); [ $l -lt 5 ] && l=5; [ $l -lt $1 ] && echo $l || echo $1; }
run() {
  local name=$1 secs=$(lim $2) log=$3 s rc; shift 3
  s=$(date +%s)
  timeout "$secs" "$@" >> "$log" 2>&1; rc=$?
  echo "== $name: exit $rc after $(( $(date +%s) - s )) s$([ $rc = 124 ] && echo " (timed out at $secs s)")" >> "$S"
  tail -n 3 "$log" >> "$S"
  return $rc
}
