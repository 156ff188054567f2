package bench

import "testing"

// go test -run '^$' -bench . -benchmem ./test/bench/
func BenchmarkMicro(b *testing.B) {
	for _, m := range Micros {
		b.Run(m.Name, m.F)
	}
}
