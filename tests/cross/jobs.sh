# shellcheck shell=bash
# Sourced by the cross / fuzz runners: run commands JOBS (default 2) at a time in the background.
#   bg_job NAME COMMAND...   start COMMAND when fewer than JOBS are running; its output goes to
#                            $BG_DIR/NAME.log and is printed whole when it ends
#   bg_wait                  wait for all; returns 1 if any failed (each failure is named)
# BG_DIR: a fresh temporary directory unless set before sourcing (created if missing; a job's
# status file from an earlier run is removed when the job of that name starts).
BG_DIR="${BG_DIR:-$(mktemp -d)}"
mkdir -p "$BG_DIR"
BG_NAMES=()
bg_job() {
  local name="$1"
  shift
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do wait -n || true; done
  BG_NAMES+=("$name")
  rm -f "$BG_DIR/$name.rc"
  (
    set +e
    "$@" >"$BG_DIR/$name.log" 2>&1
    echo $? >"$BG_DIR/$name.rc"
    cat "$BG_DIR/$name.log"
  ) &
}
bg_wait() {
  wait
  local n bad=0
  for n in "${BG_NAMES[@]}"; do
    if [ "$(cat "$BG_DIR/$n.rc" 2>/dev/null)" != 0 ]; then
      echo "== FAILED: $n (log: $BG_DIR/$n.log)"
      bad=1
    fi
  done
  BG_NAMES=()
  return $bad
}
