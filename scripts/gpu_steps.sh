# Sourced by the scripts/gpu_*.sh checks: `step NAME SECONDS COMMAND...` runs COMMAND under `timeout`, its output also
# appended to $LOG, and counts a failure in $failed. With STEPS set, only the steps it names run; with BUDGET set
# (seconds since the script started), each step's limit is cut to what is left and a step with under 20 s is skipped,
# so one call of the device tool ends inside its limit.
step() {
  local name="$1" limit="$2"
  shift 2
  if [ -n "${STEPS:-}" ]; then
    case " $STEPS " in *" $name "*) ;; *) echo "=== $name: not selected" | tee -a "$LOG"; return 0 ;; esac
  fi
  if [ -n "${BUDGET:-}" ]; then
    local left=$((BUDGET - SECONDS))
    if [ "$left" -lt 20 ]; then
      echo "=== $name: skipped, ${left}s left of ${BUDGET}s" | tee -a "$LOG"
      return 0
    fi
    [ "$limit" -le "$left" ] || limit="$left"
  fi
  echo "=== $name ($(date -u +%H:%M:%S), t=${SECONDS}s, limit ${limit}s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc in $((SECONDS - start))s" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  return 0
}
