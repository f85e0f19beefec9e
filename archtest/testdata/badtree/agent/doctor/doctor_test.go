package doctor

// Tests of agent/ may use syscalls.
import _ "syscall"
