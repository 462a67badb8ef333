package batch

// queue is a FIFO on a ring buffer. It shrinks when mostly empty, so a
// burst (a million keys at once) does not pin its memory after it drains.
type queue[T any] struct {
	buf  []T
	head int
	n    int
}

const (
	queueMinCap    = 4  // first allocation
	queueShrinkCap = 32 // never shrink below this: small rings are cheap
)

func (q *queue[T]) len() int { return q.n }

func (q *queue[T]) push(v T) {
	if q.n == len(q.buf) {
		c := 2 * len(q.buf)
		if c == 0 {
			c = queueMinCap
		}
		q.resize(c)
	}
	q.buf[(q.head+q.n)%len(q.buf)] = v
	q.n++
}

// front returns the oldest element; the queue must not be empty.
func (q *queue[T]) front() *T { return &q.buf[q.head] }

// at returns the i-th oldest element, 0 <= i < len.
func (q *queue[T]) at(i int) *T { return &q.buf[(q.head+i)%len(q.buf)] }

func (q *queue[T]) pop() T {
	var zero T
	v := q.buf[q.head]
	q.buf[q.head] = zero // drop the reference so the GC can take it
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	if q.n == 0 {
		q.head = 0
		if len(q.buf) > queueShrinkCap {
			q.buf = nil
		}
	} else if len(q.buf) > queueShrinkCap && q.n < len(q.buf)/4 {
		q.resize(len(q.buf) / 2)
	}
	return v
}

// filter keeps the elements for which keep is true, in order.
func (q *queue[T]) filter(keep func(*T) bool) {
	kept := make([]T, 0, q.n)
	for i := 0; i < q.n; i++ {
		if p := q.at(i); keep(p) {
			kept = append(kept, *p)
		}
	}
	c := len(q.buf)
	for c > queueShrinkCap && len(kept) < c/4 {
		c /= 2
	}
	nb := make([]T, c)
	copy(nb, kept)
	q.buf, q.head, q.n = nb, 0, len(kept)
}

func (q *queue[T]) resize(c int) {
	nb := make([]T, c)
	for i := 0; i < q.n; i++ {
		nb[i] = *q.at(i)
	}
	q.buf, q.head = nb, 0
}

func (q *queue[T]) reset() { *q = queue[T]{} }
