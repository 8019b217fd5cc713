package scrape

// Prepared is what s holds encoded in the text format or OpenMetrics,
// without asking for it as a scrape does.
func (s *Rendered[T]) Prepared(openMetrics bool) Encoded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.encoded[b2i(openMetrics)]
}
