// Package s3fence fences writes to S3-compatible object stores
// (aws-sdk-go-v2): [Guard.Put] writes an object with the writer's fencing
// token in the object's own metadata, conditional on the object not having
// been written under a higher token since Put read it, using S3's
// conditional writes (If-None-Match: * and If-Match: <ETag> on PutObject,
// 412 Precondition Failed when the condition fails).
//
// # Guarantee
//
// Put reads the object's token and ETag, rejects a token lower than the
// stored one (fence.ErrStaleToken), and writes with If-Match on the ETag it
// read (If-None-Match: * where there was no object). The store writes only
// if the version that Put checked is still the current one, so the check
// and the write are one atomic step on the same object: when Put returns
// nil, no write under a higher token of the same lock had landed on the
// key since the version Put checked, and the key now holds Put's body and
// token. On a store that evaluates conditions atomically per key, and
// within the limit below, the token of a key written only through Put
// never decreases. An equal token is admitted (one holder writes many
// times); Seq 0 is always rejected (fence.ErrNoToken), so a Redlock grant
// cannot write; a token of another lock name than the one the key was
// written under is refused (ErrOtherLock), since tokens of different locks
// are not comparable.
//
// [New] refuses a store that ignores conditions: before it returns a
// Guard it writes a probe object and checks, among other things, that a
// deliberately stale conditional write fails with 412 ([Verify] lists the
// checks; "dlock check-fence s3://bucket/prefix" runs them, and a
// concurrent check, from the command line).
//
// # Limit
//
// S3 compares ETags, and on most stores (AWS S3 for single-part objects
// without SSE-KMS or SSE-C, versitygw, MinIO) the ETag is the MD5 of the
// content. A write that gives a key content one of its earlier versions
// had, under a higher token, brings back that version's ETag, and a writer
// that read the earlier version and paused still passes its If-Match
// afterwards (an ABA). Put refuses the case it can see, a body that is the
// content it read under another token ([ErrSameContent]); it cannot see an
// older repeat (content X, then Y, then X again). Put's guarantee holds
// when no two writes of a key under different tokens have the same
// content: include the token, a version number or a timestamp in what you
// write.
//
// Only writes through Put are fenced. A plain PutObject, a CopyObject, a
// multipart upload, a restore of an old version or a lifecycle rule can
// write the key unchecked; a deleted key (or a delete marker in a
// versioned bucket) forgets its token, and the next Put of any token
// creates it again. Do not delete fenced keys; write a tombstone through
// Put instead.
//
// # Why the token lives in the object itself
//
// A separate "fence object" beside the data (a key holding the highest
// token, raised with a conditional PUT before each data write) is not
// safe: raising the fence and writing the data are two requests, and a
// holder that passes the fence, pauses, and then writes the data
// overwrites a newer holder's data, the very stale write that fencing
// exists to stop. A conditional write can only check the object it
// writes, so the token must be part of that object's state: its metadata,
// replaced together with its content by one PUT.
//
// # Stores
//
// Tested here: versitygw v1.8.0 with its posix backend, as a real server
// process (the fence.Guard conformance suite with 50 concurrent writers of
// interleaved tokens on one key, and the tests of this package). AWS S3
// itself was not tested here, nor MinIO, Ceph RGW, Cloudflare R2, Google
// Cloud Storage's S3 API or any other store: run "dlock check-fence"
// against yours before trusting it. Servers have shipped conditional
// writes that were ignored altogether, or that held one request at a time
// but let concurrent writers all pass their check (seaweedfs#8800 for
// If-None-Match: *; versitygw's posix backend before v1.8.0,
// versitygw#2288). New catches the first kind; only a concurrent load,
// such as dlock check-fence runs, can show the second.
//
// Put works around two store behaviours. versitygw's HEAD reads an
// object's metadata and its ETag at two moments, so a write landing in
// between pairs one version's token with the next version's ETag: Put
// trusts a read only when two HEADs in a row agree on the ETag and the
// write ID. AWS S3 answers 409 ConditionalRequestConflict while another
// conditional write of the key is in flight: Put waits and tries again.
//
// # Caveats
//
//   - An uncontended Put costs two HEADs and a PUT; each lost race (412,
//     409) costs a re-read and another PUT, up to WithMaxAttempts.
//   - A PUT that times out (WithAttemptTimeout) or fails in transit is
//     settled by reading the object's write ID (MetaWriteID). When Put's
//     own ctx ends first, it returns an *OutcomeUnknownError; Guard.Landed
//     tells later, but a request still in flight can land until the key is
//     written again.
//   - Put replaces the object's user metadata with its own two entries
//     (x-amz-meta-dlock-token, x-amz-meta-dlock-write-id) and sets no
//     Content-Type. Objects are written with one PutObject: up to 5 GiB on
//     AWS S3, and a body that is not an io.ReadSeeker is held in memory.
//   - Conditions are evaluated by the store against its own copy of the
//     object. A store (or a cache in front of it) that answers HEAD from a
//     lagging replica only costs retries; one that evaluates If-Match
//     against a lagging replica is not safe, whatever New finds.
//   - Put needs s3:GetObject (for HEAD) and s3:PutObject on the keys it
//     writes. Without s3:ListBucket on the bucket, AWS S3 answers a HEAD
//     of a missing key with 403 instead of 404, and Put cannot create a
//     key.
//   - New needs s3:PutObject, s3:GetObject and s3:DeleteObject on the
//     probe prefix (WithProbePrefix) and deletes its probe object; in a
//     versioned bucket the probe leaves noncurrent versions behind.
package s3fence
