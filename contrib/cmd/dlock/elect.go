package main

import "context"

func runElect(ctx context.Context, e *env, args []string) error   { return nil }
