package lifecycle

import "strings"

// Bits of a heap tuple header (PostgreSQL's access/htup_details.h), as
// heap_page_items reports them in t_infomask and t_infomask2.
const (
	heapXmaxKeyshrLock = 0x0010
	heapXmaxExclLock   = 0x0040
	heapXmaxLockOnly   = 0x0080
	heapXminCommitted  = 0x0100
	heapXminInvalid    = 0x0200
	heapXmaxCommitted  = 0x0400
	heapXmaxInvalid    = 0x0800
	heapXmaxIsMulti    = 0x1000

	heapHotUpdated = 0x4000 // t_infomask2
	heapOnlyTuple  = 0x8000 // t_infomask2
)

// Line pointer states (lp_flags).
const (
	lpUnused   = 0
	lpNormal   = 1
	lpRedirect = 2
	lpDead     = 3
)

// Flags decodes the bits the lifecycle shows, in the seed's order: how
// the version is chained (HOT_UPDATED: its successor is heap-only, so no
// index entry was added for it; HEAP_ONLY: reached through a HOT chain,
// no index points at it), then the hint bits of its inserting and deleting
// transactions (set by whoever first checked them: missing bits mean
// "not checked yet", not "in progress"), then how xmax holds the row when
// it only locks it.
func Flags(infomask, infomask2 int) string {
	var f []string
	if infomask2&heapHotUpdated != 0 {
		f = append(f, "HOT_UPDATED")
	}
	if infomask2&heapOnlyTuple != 0 {
		f = append(f, "HEAP_ONLY")
	}
	switch {
	case infomask&(heapXminCommitted|heapXminInvalid) == heapXminCommitted|heapXminInvalid:
		f = append(f, "XMIN_FROZEN")
	case infomask&heapXminCommitted != 0:
		f = append(f, "XMIN_COMMITTED")
	case infomask&heapXminInvalid != 0:
		f = append(f, "XMIN_INVALID")
	}
	if infomask&heapXmaxCommitted != 0 {
		f = append(f, "XMAX_COMMITTED")
	}
	if infomask&heapXmaxInvalid != 0 {
		f = append(f, "XMAX_INVALID")
	}
	if infomask&heapXmaxLockOnly != 0 {
		f = append(f, "XMAX_LOCK_ONLY")
	}
	switch infomask & (heapXmaxKeyshrLock | heapXmaxExclLock) {
	case heapXmaxKeyshrLock | heapXmaxExclLock:
		f = append(f, "XMAX_SHR_LOCK")
	case heapXmaxKeyshrLock:
		f = append(f, "XMAX_KEYSHR_LOCK")
	case heapXmaxExclLock:
		f = append(f, "XMAX_EXCL_LOCK")
	}
	if infomask&heapXmaxIsMulti != 0 {
		f = append(f, "XMAX_IS_MULTI")
	}
	return strings.Join(f, "|")
}

// lpState names a line pointer's state.
func lpState(flags int) string {
	switch flags {
	case lpUnused:
		return "unused"
	case lpNormal:
		return "normal"
	case lpRedirect:
		return "redirect"
	case lpDead:
		return "dead"
	}
	return "unknown"
}
