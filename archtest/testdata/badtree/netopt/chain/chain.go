// Package chain reaches agent/ through android.
package chain

import _ "github.com/vig-edge/vig/android"
