package jetson

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Systemd tells the service manager about vig's state (sd_notify): READY=1 once
// the listeners accept, WATCHDOG=1 at half of WatchdogSec while vig serves, and
// STOPPING=1 when the drain starts. The unit in jetson/systemd is Type=notify, so
// systemd counts vig as started only after READY=1 and restarts it when the
// watchdog pings stop.
//
// A Systemd is used by one goroutine (the one that serves); the watchdog pinger is
// its own goroutine, owned by the Systemd and joined by Stopping.
type Systemd struct {
	socket   string        // $NOTIFY_SOCKET
	interval time.Duration // 0: no watchdog requested
	alive    func() error  // nil: always alive

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewSystemd reads $NOTIFY_SOCKET and $WATCHDOG_USEC/$WATCHDOG_PID. It returns nil
// and no error when vig does not run under systemd (NOTIFY_SOCKET unset: a shell,
// adb, a test), and an error that says what is wrong when the watchdog variables
// are malformed. alive, when not nil, is asked before every watchdog ping: a
// failing check withholds the ping, so systemd restarts a vig that is up but wedged.
func NewSystemd(alive func() error) (*Systemd, error) {
	socket := os.Getenv("NOTIFY_SOCKET")
	if socket == "" {
		return nil, nil
	}
	wd, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return nil, fmt.Errorf("systemd watchdog: %w (check WatchdogSec= in the unit)", err)
	}
	return &Systemd{socket: socket, interval: wd / 2, alive: alive}, nil
}

// Socket is the notification socket vig reports to.
func (s *Systemd) Socket() string { return s.socket }

// WatchdogInterval is how often vig pings the watchdog (half of WatchdogSec), or 0
// when the unit sets no watchdog.
func (s *Systemd) WatchdogInterval() time.Duration { return s.interval }

// Ready sends READY=1 and starts the watchdog pinger when the unit asked for one.
func (s *Systemd) Ready() error {
	if err := s.notify(daemon.SdNotifyReady); err != nil {
		return err
	}
	if s.interval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.watchdog()
	}
	return nil
}

// Stopping stops the watchdog pinger (waiting until it has exited, so no ping
// follows) and sends STOPPING=1. Safe to call more than once and before Ready.
func (s *Systemd) Stopping() error {
	var err error
	s.once.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		err = s.notify(daemon.SdNotifyStopping)
	})
	return err
}

// watchdog pings at s.interval until Stopping. This ticker exists only under a
// unit with WatchdogSec=: it is the service manager's liveness contract, the one
// periodic wake-up vig accepts while idle.
func (s *Systemd) watchdog() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.alive != nil && s.alive() != nil {
			continue // withheld: systemd restarts vig after WatchdogSec
		}
		// A failed ping is retried at the next tick; systemd acts if they all fail.
		_ = s.notify(daemon.SdNotifyWatchdog)
	}
}

func (s *Systemd) notify(state string) error {
	sent, err := daemon.SdNotify(false, state)
	if err != nil {
		return fmt.Errorf("sd_notify %s to %s: %w", state, s.socket, err)
	}
	if !sent {
		return fmt.Errorf("sd_notify %s: %w (NOTIFY_SOCKET was unset after start)", state, errors.ErrUnsupported)
	}
	return nil
}
