/* A Redis client for one libuv loop: one connection to one server, commands pipelined,
 * replies handed back in order. The fleet limiter uses it today (fleet/fleet.c), the
 * Redis sink and the shared source and route stores later. Owns the socket, the RESP
 * framing (hiredis's formatter and reader: we never parse RESP by hand), the connection
 * handshake (AUTH, SELECT) and the reconnect backoff. Never blocks its loop, never calls
 * back from inside ak_redis_command (a command that cannot be sent returns an error
 * there), never puts a password into an error text, never knows who calls it.
 *
 * Thread rule: every function but ak_redis_url_parse and ak_redis_url_redacted runs on
 * the loop's thread. */
#ifndef AK_NET_REDIS_H
#define AK_NET_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include <hiredis/hiredis.h>

/* redis://[[user]:password@]host[:port][/db]. host: a name, an IPv4 address or [IPv6]. */
typedef struct ak_redis_url {
  char host[256];
  int port;                 /* 6379 when absent */
  int db;                   /* 0 when absent */
  char user[128];           /* "" = none (AUTH password only) */
  char password[256];       /* "" = none */
} ak_redis_url_t;

/* Parses url into *out. 0, or -1 with why (no secret in it: "must start with redis://",
 * "rediss:// (TLS) is not supported by this build", "bad port", ...). */
int ak_redis_url_parse(const char *url, ak_redis_url_t *out, char *why, size_t whylen);
/* "redis://host:port/db" (no user, no password) into buf. */
void ak_redis_url_redacted(const ak_redis_url_t *u, char *buf, size_t len);

typedef struct ak_redis ak_redis_t;

typedef enum {
  AK_REDIS_DOWN = 0,        /* no connection; a reconnect is scheduled (or stopped) */
  AK_REDIS_CONNECTING,      /* resolving, connecting, or waiting on the handshake */
  AK_REDIS_UP,              /* the handshake answered: commands go out */
} ak_redis_state_t;

/* A reply, or NULL: the command got no reply (the connection failed or was closed, or
 * the client was freed). A Redis error reply (-ERR ...) is a reply of type
 * REDIS_REPLY_ERROR, not NULL. The reply belongs to the client: valid during the call. */
typedef void (*ak_redis_reply_fn)(void *priv, redisReply *reply);

typedef struct ak_redis_opts {
  const ak_redis_url_t *url;        /* copied */
  long connect_timeout_ms;          /* resolve + connect + handshake; 0 = 2000 */
  /* A reply that has not come this long after its command was written closes the
   * connection (every command out gets NULL) and a reconnect follows: a server that
   * stopped answering is given up on. 0 = never. */
  long stall_timeout_ms;
  long backoff_min_ms, backoff_max_ms; /* between reconnects; 0 = 100 and 2000 */
  /* Each new connection's commands to run after AUTH and SELECT, before any command of
   * the caller (SCRIPT LOAD ...): argv form, copied. Their replies are checked: an error
   * closes the connection. */
  const char *const *const *init_argv;  /* ninit arrays of strings, each NULL-terminated */
  size_t ninit;
  /* Called on the loop thread each time the state changes (may be NULL). */
  void (*on_state)(void *ctx, ak_redis_state_t st, const char *why);
  void *ctx;
  /* Asked on the loop thread about each address (resolved or literal, port set) right
   * before a socket connects to it (may be NULL: every address is tried). false skips the
   * address and its why (secret-free) becomes the loss's why when no address is left. An
   * egress guard goes here: what it judges is what is connected to. */
  bool (*addr_ok)(void *ctx, const struct sockaddr *sa, char *why, size_t whylen);
} ak_redis_opts_t;

/* Does not connect yet. NULL when out of memory. */
ak_redis_t *ak_redis_new(uv_loop_t *loop, const ak_redis_opts_t *opts);
/* Connect now, and again after every loss (with backoff) until ak_redis_free. */
void ak_redis_start(ak_redis_t *r);
ak_redis_state_t ak_redis_state(const ak_redis_t *r);
/* Queue a command (argv with lengths; binary safe) for the next flush. 0, or -1 when the
 * connection is not UP (nothing queued, cb never called). cb is called exactly once per
 * queued command, on the loop thread, in the order commands were queued. */
int ak_redis_command(ak_redis_t *r, int argc, const char **argv, const size_t *lens, ak_redis_reply_fn cb,
                     void *priv);
/* Write what was queued (one write for the lot). Commands queued and not flushed go out
 * at the latest on the next loop iteration. */
void ak_redis_flush(ak_redis_t *r);
/* Commands written or queued whose reply has not come. */
size_t ak_redis_pending(const ak_redis_t *r);
/* Close the connection now (every pending command gets NULL) and reconnect after the
 * backoff; why goes to on_state. */
void ak_redis_reset(ak_redis_t *r, const char *why);
/* Closes (every pending command gets NULL, from inside this call) and frees once the
 * handles are closed: run the loop after it until it has no handle of this client left. */
void ak_redis_free(ak_redis_t *r);

#endif
