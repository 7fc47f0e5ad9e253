/* The service manager's readiness protocol (sd_notify): one datagram of "KEY=VALUE"
 * lines to the AF_UNIX socket named by $NOTIFY_SOCKET. Owns nothing but that send; never
 * fails the caller's operation because no manager listens (no NOTIFY_SOCKET is the
 * normal case outside systemd). */
#ifndef AK_CORE_NOTIFY_H
#define AK_CORE_NOTIFY_H

/* Send state (e.g. "READY=1\nSTATUS=listening"). 1 sent, 0 no NOTIFY_SOCKET set,
 * -1 the socket is set but the send failed (errno kept). */
int ak_notify_send(const char *state);

/* ak_notify_send to an explicit socket path ("@name" is the abstract namespace). */
int ak_notify_send_to(const char *socket_path, const char *state);

#endif
