package main

import (
	"log/slog"

	"github.com/vig-edge/vig/jetson"
)

// notifyReady tells systemd that vig serves (READY=1) and starts the watchdog pings
// when the unit sets WatchdogSec. It returns the function that the drain calls
// first: it stops the pings and sends STOPPING=1. Outside systemd both do nothing
// but say so at debug level.
func notifyReady(log *slog.Logger) (stopping func()) {
	sd, err := jetson.NewSystemd(nil)
	if err != nil {
		log.Error("systemd", "err", err)
		return func() {}
	}
	if sd == nil {
		log.Debug("not started by systemd (NOTIFY_SOCKET unset): no sd_notify")
		return func() {}
	}
	if err := sd.Ready(); err != nil {
		log.Error("systemd", "err", err)
	} else {
		log.Info("systemd notified: READY=1", "socket", sd.Socket(), "watchdog_every", sd.WatchdogInterval())
	}
	return func() {
		if err := sd.Stopping(); err != nil {
			log.Error("systemd", "err", err)
		}
	}
}
