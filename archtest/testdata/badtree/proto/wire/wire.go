// Package wire is clean; its test is not.
package wire
