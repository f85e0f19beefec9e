// Package testdoc has its doc comment in a test file only, which go doc does not show.
package testdoc
