// Package ring is clean.
package ring
