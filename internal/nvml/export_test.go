package nvml

// SetLinkStateFields switches NVLink states to field values in the fast
// batch, for tests of that path.
func SetLinkStateFields(r *Reader, on bool) { r.linkStateFields = on }
