package lock

// DefaultOwner is the owner stored with grants when WithOwner is not given.
var DefaultOwner = defaultOwner
