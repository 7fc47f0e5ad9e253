/* TLS for the server layer on OpenSSL 3 (see tls.h): owns the contexts (an SSL_CTX built
 * from the PEM files, their copied paths for a reload, a refcount) and the per-connection
 * sessions (an SSL between two byte queues: the caller feeds one with ciphertext and
 * drains the other). Never touches a socket, never logs, and never puts a byte of a file's content
 * or an OpenSSL error string into an error: errors are our own words, the dotted key and
 * the path, so nothing read from the private key can leak through them. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include "core/buf.h"
#include "http/tls.h"

#define PEM_MAX_BYTES (1u << 20)
/* TLS 1.2 suites: forward secrecy and AEAD only (TLS 1.3 suites are all of that already). */
#define TLS12_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20:!aNULL:!eNULL"
#define VERIFY_DEPTH 10

struct ak_htls_ctx {
  atomic_uint refs;
  SSL_CTX *ssl;
  ak_htls_client_t mode;
  char *cert, *key, *client_ca, *prefix; /* copies, for ak_htls_ctx_reload */
  uint8_t leaf_sha256[32];
};

/* Ciphertext waiting in one direction: bytes [off, len) of p. Both of a session's BIOs
 * are our own over one of these, not memory BIOs: peek_out hands out the bytes in place
 * and consume_out only moves off, and a queue that empties gives back a block grown past
 * QUEUE_KEEP, so an idle keep-alive connection holds no large buffer. */
typedef struct {
  uint8_t *p;
  size_t off, len, cap;
  bool failed; /* out of memory: the session is broken */
} queue_t;
#define QUEUE_KEEP 16384u

struct ak_htls {
  ak_htls_ctx_t *ctx;
  SSL *ssl;
  queue_t in, out;         /* ciphertext from the peer, to the peer (ssl's BIOs read and write them) */
  ak_buf_t early;          /* plaintext written before the handshake completed */
  bool established, failed, peer_closed, shut;
  bool unverified;         /* request mode: the peer's chain failed a check we let pass */
};

/* ------------------------------------------------------------------ errors ---- */

static void add_line(ak_buf_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_line(ak_buf_t *l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (l->len) ak_buf_append(l, "\n", 1);
  ak_buf_vprintf(l, fmt, ap);
  va_end(ap);
}

/* A PEM pass phrase is never asked for (OpenSSL's default would read the terminal). */
static int no_pass(char *buf, int size, int rwflag, void *u) {
  (void)buf, (void)size, (void)rwflag, (void)u;
  return -1;
}

/* ----------------------------------------------------------------- loading ---- */

/* The whole file, NUL-terminated. NULL after reporting under key. The caller wipes a
 * key's buffer before freeing it. */
static char *read_pem(ak_buf_t *errs, const char *key, const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    add_line(errs, "%s: cannot read %s: %s", key, path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(PEM_MAX_BYTES + 1);
  errno = 0;
  size_t n = buf ? fread(buf, 1, PEM_MAX_BYTES + 1, f) : 0;
  int rd_errno = errno;
  bool failed = !buf || ferror(f);
  fclose(f);
  if (failed) {
    add_line(errs, "%s: cannot read %s: %s", key, path, buf ? strerror(rd_errno ? rd_errno : EIO) : "out of memory");
    if (buf) OPENSSL_cleanse(buf, n);
    free(buf);
    return NULL;
  }
  const char *why = NULL;
  if (n > PEM_MAX_BYTES) why = "is larger than 1 MiB";
  else if (memchr(buf, '\0', n)) why = "is not a PEM file (it holds a NUL byte)";
  if (why) {
    add_line(errs, "%s: %s %s", key, path, why);
    OPENSSL_cleanse(buf, n);
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* Every certificate of a PEM text, in order (other PEM blocks are skipped). NULL after
 * reporting under key when there is none, or when a block does not parse. */
static STACK_OF(X509) *parse_certs(ak_buf_t *errs, const char *key, const char *path, const char *pem, size_t len) {
  BIO *b = BIO_new_mem_buf(pem, (int)len);
  STACK_OF(X509) *sk = sk_X509_new_null();
  if (!b || !sk) {
    BIO_free(b);
    sk_X509_free(sk);
    add_line(errs, "%s: %s: out of memory", key, path);
    return NULL;
  }
  ERR_clear_error();
  X509 *x;
  bool oom = false;
  while ((x = PEM_read_bio_X509(b, NULL, no_pass, NULL)))
    if (!sk_X509_push(sk, x)) {
      X509_free(x);
      oom = true;
      break;
    }
  /* the loop ends on "no start line" at the end of the text, or on a block that fails */
  unsigned long e = ERR_peek_last_error();
  bool clean_end = !e || (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE);
  ERR_clear_error();
  BIO_free(b);
  int n = sk_X509_num(sk);
  if (oom) add_line(errs, "%s: %s: out of memory", key, path);
  else if (n == 0)
    add_line(errs, "%s: %s holds no PEM certificate (%s)", key, path,
             clean_end ? "none found" : "a CERTIFICATE block does not parse");
  else if (!clean_end)
    add_line(errs, "%s: %s: the PEM block after certificate %d does not parse", key, path, n);
  if (oom || n == 0 || !clean_end) {
    sk_X509_pop_free(sk, X509_free);
    return NULL;
  }
  return sk;
}

static EVP_PKEY *parse_key(ak_buf_t *errs, const char *key, const char *path, const char *pem, size_t len) {
  if (strstr(pem, "-----BEGIN ENCRYPTED PRIVATE KEY-----") || strstr(pem, "Proc-Type: 4,ENCRYPTED")) {
    add_line(errs, "%s: %s holds no usable PEM private key (encrypted keys are not supported)", key, path);
    return NULL;
  }
  BIO *b = BIO_new_mem_buf(pem, (int)len);
  if (!b) {
    add_line(errs, "%s: %s: out of memory", key, path);
    return NULL;
  }
  ERR_clear_error();
  EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, no_pass, NULL);
  ERR_clear_error();
  BIO_free(b);
  if (!k) add_line(errs, "%s: %s holds no usable PEM private key", key, path);
  return k;
}

/* Why OpenSSL refused a certificate, in our words (its own text is never passed on). */
static const char *cert_refusal(void) {
  unsigned long e = ERR_peek_last_error();
  const char *why = "OpenSSL refused it";
  if (ERR_GET_LIB(e) == ERR_LIB_SSL) {
    int r = ERR_GET_REASON(e);
    if (r == SSL_R_EE_KEY_TOO_SMALL || r == SSL_R_CA_KEY_TOO_SMALL) why = "its key is too small for TLS";
    else if (r == SSL_R_CA_MD_TOO_WEAK) why = "it is signed with too weak a digest for TLS";
  }
  ERR_clear_error();
  return why;
}

/* request mode: the handshake goes on whatever the chain, and the session remembers that
 * a check failed (SSL_get_verify_result says so too; both are required for a pin). */
static int accept_any(int ok, X509_STORE_CTX *xs) {
  if (!ok) {
    SSL *s = X509_STORE_CTX_get_ex_data(xs, SSL_get_ex_data_X509_STORE_CTX_idx());
    ak_htls_t *t = s ? SSL_get_app_data(s) : NULL;
    if (t) t->unverified = true;
  }
  return 1;
}

static const char *mode_name(ak_htls_client_t m) {
  return m == AK_HTLS_CLIENT_REQUIRE ? "require" : m == AK_HTLS_CLIENT_REQUEST ? "request" : "none";
}

/* The SSL_CTX from parsed parts; NULL after reporting. Takes no ownership. */
static SSL_CTX *build(ak_buf_t *errs, const ak_htls_files_t *f, const char *pfx, STACK_OF(X509) *chain,
                      EVP_PKEY *pkey, STACK_OF(X509) *cas) {
  SSL_CTX *s = SSL_CTX_new(TLS_server_method());
  if (!s) {
    add_line(errs, "%s: cannot create a TLS context (out of memory)", pfx);
    ERR_clear_error();
    return NULL;
  }
  bool ok = SSL_CTX_set_min_proto_version(s, TLS1_2_VERSION) == 1 && SSL_CTX_set_cipher_list(s, TLS12_CIPHERS) == 1;
  SSL_CTX_set_options(s, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                             SSL_OP_PRIORITIZE_CHACHA);
  SSL_CTX_set_dh_auto(s, 1);
  /* Idle keep-alive connections give their record buffers back (there may be 20000). */
  SSL_CTX_set_mode(s, SSL_MODE_RELEASE_BUFFERS);
  /* No server-side session cache shared by the loop threads: tickets carry the session
   * (their keys are this context's own, so a reload also ends resumption of old ones). */
  SSL_CTX_set_session_cache_mode(s, SSL_SESS_CACHE_OFF);
  ok = ok && SSL_CTX_set_session_id_context(s, (const unsigned char *)"ankusa", 6) == 1;
  if (!ok) {
    add_line(errs, "%s: cannot set up a TLS context (out of memory)", pfx);
    goto fail;
  }
  ERR_clear_error();
  if (SSL_CTX_use_certificate(s, sk_X509_value(chain, 0)) != 1) {
    add_line(errs, "%s.cert: %s: %s", pfx, f->cert, cert_refusal());
    goto fail;
  }
  for (int i = 1; i < sk_X509_num(chain); i++)
    if (SSL_CTX_add1_chain_cert(s, sk_X509_value(chain, i)) != 1) {
      add_line(errs, "%s.cert: %s: certificate %d of the chain: %s", pfx, f->cert, i + 1, cert_refusal());
      goto fail;
    }
  if (SSL_CTX_use_PrivateKey(s, pkey) != 1 || SSL_CTX_check_private_key(s) != 1) {
    ERR_clear_error();
    add_line(errs, "%s.key: %s does not match the certificate in %s", pfx, f->key, f->cert);
    goto fail;
  }
  if (cas) {
    X509_STORE *st = SSL_CTX_get_cert_store(s);
    for (int i = 0; i < sk_X509_num(cas); i++) {
      X509 *x = sk_X509_value(cas, i);
      if (X509_STORE_add_cert(st, x) != 1 || SSL_CTX_add_client_CA(s, x) != 1) {
        add_line(errs, "%s.client_ca: %s: certificate %d: %s", pfx, f->client_ca, i + 1, cert_refusal());
        goto fail;
      }
    }
  }
  /* A client certificate counts only for client authentication; every certificate of
   * client_ca is an anchor, intermediates included (a bundle of one intermediate is
   * enough, as it was with GnuTLS). Nothing but client_ca is trusted. */
  X509_VERIFY_PARAM *vp = SSL_CTX_get0_param(s);
  if (SSL_CTX_set_purpose(s, X509_PURPOSE_SSL_CLIENT) != 1 || SSL_CTX_set_trust(s, X509_TRUST_SSL_CLIENT) != 1 ||
      X509_VERIFY_PARAM_set_flags(vp, X509_V_FLAG_PARTIAL_CHAIN) != 1) {
    add_line(errs, "%s: cannot set up client certificate checks (out of memory)", pfx);
    goto fail;
  }
  SSL_CTX_set_verify_depth(s, VERIFY_DEPTH);
  if (f->client_cert == AK_HTLS_CLIENT_REQUIRE)
    SSL_CTX_set_verify(s, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  else if (f->client_cert == AK_HTLS_CLIENT_REQUEST)
    SSL_CTX_set_verify(s, SSL_VERIFY_PEER, accept_any);
  else
    SSL_CTX_set_verify(s, SSL_VERIFY_NONE, NULL);
  ERR_clear_error();
  return s;
fail:
  ERR_clear_error();
  SSL_CTX_free(s);
  return NULL;
}

static char *dup_or_null(const char *s, bool *oom) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *oom = true;
  return d;
}

static void ctx_free(ak_htls_ctx_t *c) {
  SSL_CTX_free(c->ssl);
  free(c->cert);
  free(c->key);
  free(c->client_ca);
  free(c->prefix);
  free(c);
}

ak_htls_ctx_t *ak_htls_ctx_new(const ak_htls_files_t *f, char **err) {
  *err = NULL;
  const char *pfx = f && f->key_prefix && *f->key_prefix ? f->key_prefix : "tls";
  ak_buf_t errs = AK_BUF_INIT;
  char kc[160], kk[160], kca[160];
  snprintf(kc, sizeof kc, "%s.cert", pfx);
  snprintf(kk, sizeof kk, "%s.key", pfx);
  snprintf(kca, sizeof kca, "%s.client_ca", pfx);
  char *cert = NULL, *key = NULL, *ca = NULL;
  size_t clen = 0, klen = 0, calen = 0;
  STACK_OF(X509) *chain = NULL, *cas = NULL;
  EVP_PKEY *pkey = NULL;
  ak_htls_ctx_t *c = NULL;
  if (!f) {
    add_line(&errs, "%s: no files given", pfx);
    goto done;
  }
  if (!f->cert || !*f->cert) add_line(&errs, "%s: not set", kc);
  if (!f->key || !*f->key) add_line(&errs, "%s: not set", kk);
  if (f->client_cert != AK_HTLS_CLIENT_NONE && (!f->client_ca || !*f->client_ca))
    add_line(&errs, "%s.client_cert: \"%s\" needs %s (the CA bundle client certificates are checked against)", pfx,
             mode_name(f->client_cert), kca);
  if ((unsigned)f->client_cert > AK_HTLS_CLIENT_REQUIRE)
    add_line(&errs, "%s.client_cert: unknown mode %d", pfx, (int)f->client_cert);
  if (f->cert && *f->cert && (cert = read_pem(&errs, kc, f->cert, &clen)))
    chain = parse_certs(&errs, kc, f->cert, cert, clen);
  if (f->key && *f->key && (key = read_pem(&errs, kk, f->key, &klen)))
    pkey = parse_key(&errs, kk, f->key, key, klen);
  if (f->client_ca && *f->client_ca && (ca = read_pem(&errs, kca, f->client_ca, &calen)))
    cas = parse_certs(&errs, kca, f->client_ca, ca, calen);
  if (chain && pkey) {
    ERR_clear_error();
    if (X509_check_private_key(sk_X509_value(chain, 0), pkey) != 1)
      add_line(&errs, "%s: %s does not match the certificate in %s", kk, f->key, f->cert);
    ERR_clear_error();
  }
  if (errs.len || errs.failed) goto done;
  c = calloc(1, sizeof *c);
  bool oom = !c;
  if (c) {
    atomic_init(&c->refs, 1);
    c->mode = f->client_cert;
    c->cert = dup_or_null(f->cert, &oom);
    c->key = dup_or_null(f->key, &oom);
    c->client_ca = dup_or_null(f->client_ca, &oom);
    c->prefix = dup_or_null(pfx, &oom);
  }
  unsigned mdlen = 0;
  if (!oom && X509_digest(sk_X509_value(chain, 0), EVP_sha256(), c->leaf_sha256, &mdlen) != 1) oom = true;
  if (oom) {
    add_line(&errs, "%s: out of memory", pfx);
  } else if (!(c->ssl = build(&errs, f, pfx, chain, pkey, cas))) {
    if (!errs.len) add_line(&errs, "%s: cannot set up TLS", pfx);
  }
done:
  if (errs.len || errs.failed) {
    if (c) ctx_free(c);
    c = NULL;
  }
  sk_X509_pop_free(chain, X509_free);
  sk_X509_pop_free(cas, X509_free);
  EVP_PKEY_free(pkey);
  if (key) OPENSSL_cleanse(key, klen);
  free(cert);
  free(key);
  free(ca);
  ERR_clear_error();
  if (!c) {
    *err = ak_buf_take(&errs, NULL);
    if (!*err) *err = strdup("tls: out of memory");
  }
  ak_buf_free(&errs);
  return c;
}

ak_htls_ctx_t *ak_htls_ctx_reload(const ak_htls_ctx_t *old, char **err) {
  ak_htls_files_t f = {.cert = old->cert, .key = old->key, .client_ca = old->client_ca,
                       .client_cert = old->mode, .key_prefix = old->prefix};
  return ak_htls_ctx_new(&f, err);
}

ak_htls_ctx_t *ak_htls_ctx_ref(ak_htls_ctx_t *c) {
  if (c) atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
  return c;
}

void ak_htls_ctx_unref(ak_htls_ctx_t *c) {
  if (c && atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1) ctx_free(c);
}

void ak_htls_ctx_cert_sha256(const ak_htls_ctx_t *c, uint8_t out[32]) { memcpy(out, c->leaf_sha256, 32); }

/* -------------------------------------------------------------- the BIOs ---- */

static bool queue_add(queue_t *q, const void *data, size_t n) {
  if (q->failed) return false;
  if (q->len + n > q->cap && q->off) { /* room at the front first */
    memmove(q->p, q->p + q->off, q->len - q->off);
    q->len -= q->off;
    q->off = 0;
  }
  if (q->len + n > q->cap) {
    size_t cap = q->cap ? q->cap : 4096;
    while (cap < q->len + n) cap *= 2;
    uint8_t *p = realloc(q->p, cap);
    if (!p) {
      q->failed = true;
      return false;
    }
    q->p = p;
    q->cap = cap;
  }
  memcpy(q->p + q->len, data, n);
  q->len += n;
  return true;
}

static void queue_eat(queue_t *q, size_t n) {
  size_t have = q->len - q->off;
  q->off += n < have ? n : have;
  if (q->off < q->len) return;
  q->off = q->len = 0;
  if (q->cap > QUEUE_KEEP) {
    free(q->p);
    q->p = NULL;
    q->cap = 0;
  }
}

static int bio_write(BIO *b, const char *data, size_t n, size_t *written) {
  BIO_clear_retry_flags(b);
  *written = queue_add(BIO_get_data(b), data, n) ? n : 0;
  return *written == n;
}

/* Empty means "more to come" (retry), never the end of the stream. */
static int bio_read(BIO *b, char *data, size_t n, size_t *got) {
  queue_t *q = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  size_t have = q->len - q->off, m = n < have ? n : have;
  *got = m;
  if (!m) {
    BIO_set_retry_read(b);
    return 0;
  }
  memcpy(data, q->p + q->off, m);
  queue_eat(q, m);
  return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)num, (void)ptr;
  const queue_t *q = BIO_get_data(b);
  switch (cmd) {
  case BIO_CTRL_FLUSH: return 1;
  case BIO_CTRL_PENDING:
  case BIO_CTRL_WPENDING: return q ? (long)(q->len - q->off) : 0;
  default: return 0;
  }
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_method_init(void) {
  BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ak_htls_queue");
  if (m && BIO_meth_set_write_ex(m, bio_write) == 1 && BIO_meth_set_read_ex(m, bio_read) == 1 &&
      BIO_meth_set_ctrl(m, bio_ctrl) == 1 && BIO_meth_set_create(m, bio_create) == 1)
    bio_method = m;
  else
    BIO_meth_free(m);
}

/* -------------------------------------------------------------- sessions ---- */

ak_htls_t *ak_htls_new(ak_htls_ctx_t *ctx) {
  pthread_once(&bio_once, bio_method_init);
  if (!ctx || !bio_method) return NULL;
  ak_htls_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->early = (ak_buf_t)AK_BUF_INIT;
  t->ssl = SSL_new(ctx->ssl);
  BIO *in = BIO_new(bio_method), *out = BIO_new(bio_method);
  if (!t->ssl || !in || !out) {
    SSL_free(t->ssl);
    BIO_free(in);
    BIO_free(out);
    free(t);
    ERR_clear_error();
    return NULL;
  }
  BIO_set_data(in, &t->in);
  BIO_set_data(out, &t->out);
  SSL_set_bio(t->ssl, in, out);
  SSL_set_app_data(t->ssl, t);
  SSL_set_accept_state(t->ssl);
  t->ctx = ak_htls_ctx_ref(ctx);
  return t;
}

void ak_htls_free(ak_htls_t *t) {
  if (!t) return;
  SSL_free(t->ssl); /* and both BIOs */
  ERR_clear_error();
  free(t->in.p);
  free(t->out.p);
  if (t->early.p) OPENSSL_cleanse(t->early.p, t->early.len);
  ak_buf_free(&t->early);
  ak_htls_ctx_unref(t->ctx);
  free(t);
}

static ak_htls_status_t fail(ak_htls_t *t) {
  t->failed = true;
  ERR_clear_error();
  return AK_HTLS_ERROR;
}

/* After an SSL_* call that returned r <= 0. */
static ak_htls_status_t after(ak_htls_t *t, int r) {
  int e = SSL_get_error(t->ssl, r);
  if (t->out.failed || t->in.failed) return fail(t);
  switch (e) {
  case SSL_ERROR_WANT_READ:
  case SSL_ERROR_WANT_WRITE:
    ERR_clear_error();
    return AK_HTLS_OK;
  case SSL_ERROR_ZERO_RETURN:
    t->peer_closed = true;
    ERR_clear_error();
    return AK_HTLS_CLOSED;
  default: return fail(t);
  }
}

/* The out buffer never pushes back, so anything short of all of it is a broken session. */
static ak_htls_status_t write_all(ak_htls_t *t, const void *p, size_t n) {
  ERR_clear_error();
  size_t w = 0;
  if (SSL_write_ex(t->ssl, p, n, &w) != 1 || w != n || t->out.failed) return fail(t);
  return AK_HTLS_OK;
}

ak_htls_status_t ak_htls_feed(ak_htls_t *t, const uint8_t *p, size_t n) {
  if (t->failed) return AK_HTLS_ERROR;
  if (n && !queue_add(&t->in, p, n)) return fail(t);
  if (t->established) return t->peer_closed ? AK_HTLS_CLOSED : AK_HTLS_OK;
  ERR_clear_error();
  int r = SSL_do_handshake(t->ssl);
  if (r != 1) return after(t, r);
  t->established = true;
  ERR_clear_error();
  if (!t->early.len || t->shut) return AK_HTLS_OK;
  ak_htls_status_t st = write_all(t, t->early.p, t->early.len);
  OPENSSL_cleanse(t->early.p, t->early.len);
  ak_buf_free(&t->early);
  return st;
}

size_t ak_htls_pending_in(const ak_htls_t *t) { return t->in.len - t->in.off; }

ak_htls_status_t ak_htls_read(ak_htls_t *t, uint8_t *out, size_t cap, size_t *got) {
  *got = 0;
  if (t->failed) return AK_HTLS_ERROR;
  if (t->peer_closed) return AK_HTLS_CLOSED;
  if (!t->established || cap == 0) return AK_HTLS_OK;
  ERR_clear_error();
  int r = SSL_read_ex(t->ssl, out, cap, got);
  if (r == 1) return t->out.failed ? fail(t) : AK_HTLS_OK;
  *got = 0;
  return after(t, r);
}

ak_htls_status_t ak_htls_write(ak_htls_t *t, const uint8_t *p, size_t n) {
  if (t->failed || t->shut) return AK_HTLS_ERROR;
  if (n == 0) return AK_HTLS_OK;
  if (!t->established) return ak_buf_append(&t->early, p, n) == 0 ? AK_HTLS_OK : fail(t);
  return write_all(t, p, n);
}

const uint8_t *ak_htls_peek_out(ak_htls_t *t, size_t *n) {
  *n = t->out.len - t->out.off;
  return *n ? t->out.p + t->out.off : NULL;
}

void ak_htls_consume_out(ak_htls_t *t, size_t n) { queue_eat(&t->out, n); }

void ak_htls_shutdown(ak_htls_t *t) {
  if (t->failed || t->shut) return;
  t->shut = true;
  /* Before the handshake completes there is no session to close: the caller just closes. */
  if (!t->established) return;
  ERR_clear_error();
  (void)SSL_shutdown(t->ssl);
  ERR_clear_error();
}

bool ak_htls_established(const ak_htls_t *t) { return t->established; }

bool ak_htls_peer_sha256(const ak_htls_t *t, uint8_t out[32]) {
  if (!t->established || t->failed || t->unverified || t->ctx->mode == AK_HTLS_CLIENT_NONE) return false;
  X509 *peer = SSL_get0_peer_certificate(t->ssl);
  if (!peer || SSL_get_verify_result(t->ssl) != X509_V_OK) return false;
  unsigned mdlen = 0;
  bool ok = X509_digest(peer, EVP_sha256(), out, &mdlen) == 1 && mdlen == 32;
  ERR_clear_error();
  return ok;
}
