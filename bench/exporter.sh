# Sourced by the bench scripts that run an exporter (scrape.sh, profile.sh,
# rss.sh, soak.sh, slurm-check.sh): start it, wait until it answers, stop
# it. Bash only, so that it runs from .device/ on a GPU machine as the
# scripts do.

# exporter_start LOG COMMAND...: runs COMMAND (an exporter, or env ... and
# one) in the background with its output in LOG; EXPORTER_PID is its pid
# (env execs, so the exporter's).
exporter_start() {
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	EXPORTER_PID=$!
}

# exporter_wait ADDR [TEXT [SECONDS]]: waits until http://ADDR/metrics
# answers, with TEXT in it when given, for up to SECONDS (default 60).
# Fails, saying so, when the exporter exits or the time runs out.
exporter_wait() {
	local addr=$1 text=${2:-} seconds=${3:-60} i body
	for ((i = 0; i < seconds * 10; i++)); do
		if body=$(curl -sf "http://$addr/metrics" 2>/dev/null) && [[ -z $text || $body == *"$text"* ]]; then
			return 0
		fi
		if ! kill -0 "$EXPORTER_PID" 2>/dev/null; then
			echo "the exporter exited before it answered on $addr" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "the exporter did not answer on $addr${text:+ with $text} within ${seconds}s" >&2
	return 1
}

# exporter_stop: SIGTERM, 5 s to shut down cleanly, then SIGKILL; reaps it.
exporter_stop() {
	[[ -n ${EXPORTER_PID:-} ]] || return 0
	if kill -0 "$EXPORTER_PID" 2>/dev/null; then
		kill -TERM "$EXPORTER_PID" 2>/dev/null || true
		local i
		for ((i = 0; i < 50; i++)); do
			kill -0 "$EXPORTER_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$EXPORTER_PID" 2>/dev/null || true
	fi
	wait "$EXPORTER_PID" 2>/dev/null || true
	EXPORTER_PID=
}

# nvml_up_text: what exporter_wait waits for to have the first NVML
# sample in: up 1 where an NVIDIA driver is loaded, either value where
# none is (without a GPU it stays 0).
nvml_up_text() {
	if [[ -e /dev/nvidiactl ]]; then
		echo 'gpulink_source_up{source="nvml"} 1'
	else
		echo 'gpulink_source_up{source="nvml"}'
	fi
}
