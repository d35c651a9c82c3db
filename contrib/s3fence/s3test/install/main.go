// Command install builds the versitygw binary that package s3test starts
// (or finds the one already built) and prints its path. CI runs it before
// the tests, so that no test spends its time on the build:
//
//	go run ./contrib/s3fence/s3test/install
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
)

func main() {
	bin, err := s3test.Binary(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
