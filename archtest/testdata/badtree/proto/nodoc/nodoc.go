// A comment that is not attached to the package clause.

package nodoc
