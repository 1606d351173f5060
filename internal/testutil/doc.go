// Package testutil holds the helpers that the tests of several packages
// share: a log sink safe for concurrent writes, a free loopback address,
// a clean GEMINI_PROXY_* environment, polling an endpoint until it answers,
// one HTTP round trip, an emulator on loopback, the Interactions call the
// SDK tests make, and building, starting and stopping a gemini-proxy
// process.
//
// It is a normal package so that tests in different packages can import
// it, but only tests import it: no product code depends on it. It imports
// none of the project's packages except internal/emulator, so that the
// in-package tests of proxy, config, metrics and the rest can use it
// without an import cycle (internal/emulator's own in-package tests
// cannot, and do not).
package testutil
