//go:build unix

package servertls

import (
	"io/fs"
	"syscall"
)

// fileID returns the device and inode of a file, which a rename over it changes.
func fileID(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	return 0, 0
}
