#!/usr/bin/env bash
# Runs every fuzz target in the module for a budget of FUZZTIME each (go test
# allows one -fuzz target per run). A failure writes the failing input under
# the package's testdata/fuzz and fails the run.
#
# FUZZTIME is a count of executions (10000x; 1000000x for a longer look),
# not a duration. With a duration, go test bounds the run with a context
# deadline, and Go before 1.27 can report that deadline as a failure
# (go.dev/issue/75804): internal/fuzz's coordinator wakes on the deadline
# context's done channel and ignores the error only when its child context
# (the workers') carries the same one, but package context closes a
# parent's channel before it cancels the children. A coordinator that runs
# in that gap (more likely on a loaded machine) fails the target with a
# bare "context deadline exceeded" and no failing input, after fuzzing went
# well. On a 2-core machine with four busy loops beside it, 4 of 160 runs of
# FuzzParseLinkSpeed with a 300-500 ms duration failed that way; 0 of 100
# with a count. A count sets no deadline: the coordinator stops the workers
# itself when the count is reached, whatever the load. A duration is
# accepted where go is 1.27 or later.
#
# Each run is still bounded by the test binary's -timeout (FUZZ_TIMEOUT),
# which reports a hung target with its goroutines.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10000x}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-5m}

if [[ ! $FUZZTIME =~ ^[0-9]+x$ ]]; then
	v=$("$GO" env GOVERSION)
	if [[ ! $v =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 27)); then
		echo "fuzz: FUZZTIME=$FUZZTIME: give a count of executions (e.g. 1000000x); with a duration $v can fail a target that found nothing (go.dev/issue/75804)" >&2
		exit 2
	fi
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for pkg in $("$GO" list ./...); do
	for target in $("$GO" test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "fuzz $pkg $target"
		if ! "$GO" test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" -timeout "$FUZZ_TIMEOUT" "$pkg" >"$log" 2>&1; then
			cat "$log"
			exit 1
		fi
	done
done
