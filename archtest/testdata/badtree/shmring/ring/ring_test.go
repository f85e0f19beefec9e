package ring

// A test may use a fixture that is built on the core: only its direct imports
// are held to the rule.
import _ "github.com/vig-edge/vig/android"
