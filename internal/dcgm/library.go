package dcgm

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// gl_dcgm_open loads the library at path into the global namespace, where
// go-dcgm's calls (linked unresolved, bound lazily) find their symbols, and
// checks that go-dcgm's own dlopen("libdcgm.so.4") will find this same
// library: glibc matches an already loaded library by its SONAME. dlopen
// and dlerror run in one C call: dlerror's message is per thread.
// Returns 0 and the handle, 1 when the library cannot be loaded, 2 when it
// loads but is not what libdcgm.so.4 names.
static int gl_dcgm_open(const char *path, void **out, char *msg, size_t n) {
	void *h = dlopen(path, RTLD_LAZY | RTLD_GLOBAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(msg, n, "%s", e ? e : "dlopen failed");
		return 1;
	}
	void *byName = dlopen("libdcgm.so.4", RTLD_LAZY | RTLD_GLOBAL | RTLD_NOLOAD);
	if (byName != NULL)
		dlclose(byName); // only a reference count; h keeps it loaded
	if (byName == NULL) {
		dlclose(h);
		snprintf(msg, n, "%s does not have the SONAME libdcgm.so.4, the name go-dcgm loads", path);
		return 2;
	}
	if (byName != h) {
		dlclose(h);
		snprintf(msg, n, "another libdcgm.so.4 is already loaded in this process; go-dcgm would use it, not %s", path);
		return 2;
	}
	*out = h;
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// DefaultLibrary is the name go-dcgm loads DCGM by.
const DefaultLibrary = "libdcgm.so.4"

// ErrNoLibrary is returned while libdcgm.so.4 cannot be loaded.
var ErrNoLibrary = errors.New("DCGM library not found")

// library is libdcgm loaded by this package and never unloaded.
//
// go-dcgm dlopens "libdcgm.so.4" in Init and dlcloses it in Shutdown, and
// the program calls DCGM's functions through lazily bound PLT entries: once
// bound, an entry keeps the address it got. Were the library unloaded at a
// disconnect and loaded again at a different address on reconnect, those
// entries would point into unmapped memory. Holding a reference of our own
// keeps it mapped for the life of the process, so the engine can come and
// go as often as it likes. It also lets --dcgm.library name a file: loaded
// first, it is what go-dcgm's dlopen by name finds.
type library struct {
	path   string
	handle unsafe.Pointer
}

// loadLibrary loads path (a file or a name the dynamic linker searches).
// No DCGM function is called before this has succeeded: go-dcgm's calls
// are linked unresolved, and one made without the library kills the
// process with a symbol lookup error.
func loadLibrary(path string) (*library, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	var h unsafe.Pointer
	switch C.gl_dcgm_open(cpath, &h, &msg[0], C.size_t(len(msg))) {
	case 0:
		return &library{path: path, handle: h}, nil
	case 1:
		return nil, fmt.Errorf("%w: %s", ErrNoLibrary, C.GoString(&msg[0]))
	default:
		return nil, fmt.Errorf("loading DCGM: %s", C.GoString(&msg[0]))
	}
}
