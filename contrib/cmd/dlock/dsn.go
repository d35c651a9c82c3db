package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// etcdDSN is an etcd://h1:2379,h2:2379/prefix?ttl=10s DSN.
type etcdDSN struct {
	endpoints []string
	prefix    string
	ttl       time.Duration
}

func parseEtcdDSN(dsn string) (etcdDSN, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return etcdDSN{}, fmt.Errorf("%q: %v", dsn, err)
	}
	if u.Scheme != "etcd" {
		return etcdDSN{}, fmt.Errorf("%q: scheme %q: this command needs etcd://host:port[,host:port...]", dsn, u.Scheme)
	}
	var d etcdDSN
	for _, h := range strings.Split(u.Host, ",") {
		if h != "" {
			d.endpoints = append(d.endpoints, h)
		}
	}
	if len(d.endpoints) == 0 {
		return etcdDSN{}, fmt.Errorf("%q: no host", dsn)
	}
	d.prefix = strings.Trim(u.Path, "/")
	for k, v := range u.Query() {
		switch k {
		case "ttl":
			if d.ttl, err = time.ParseDuration(v[0]); err != nil {
				return etcdDSN{}, fmt.Errorf("%q: ttl: %v", dsn, err)
			}
		default:
			return etcdDSN{}, fmt.Errorf("%q: unknown parameter %q", dsn, k)
		}
	}
	return d, nil
}
