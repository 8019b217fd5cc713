package sampler

// Opt is a reading that may be absent: the device does not support it, the
// file does not exist on this kernel, or it could not be read this time.
// Every source uses it, so the collectors render absent values alike.
type Opt[T any] struct {
	V     T
	Valid bool
}

// Some returns a present reading.
func Some[T any](v T) Opt[T] { return Opt[T]{V: v, Valid: true} }
