// Package leak is portable and clean.
package leak
