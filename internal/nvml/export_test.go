package nvml

import "time"

// SetLinkStateFields switches NVLink states to field values in the fast
// batch, for tests of that path.
func SetLinkStateFields(r *Reader, on bool) { r.linkStateFields = on }

// SetShutdownWait sets how long Shutdown waits for calls in flight.
func SetShutdownWait(r *Reader, d time.Duration) { r.shutdownWait = d }
