"""What an operator configures and watches: flags, admission, security, listeners,
systemd, logs and metrics."""
