//go:build !unix

package capacity

func raiseNoFile() {}
