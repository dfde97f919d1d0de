/* lastline-tsvdump: one snapshot connection of a logical dump, driven by the Python coordinator.
 *
 * Why a separate process in C: escaping on the client is linear in a value's size (the server's
 * REPLACE is quadratic in the number of matches), C escapes at memory speed, and each worker has its
 * own core with no interpreter lock. The coordinator holds commits (BACKUP STAGE BLOCK_COMMIT, or FLUSH
 * TABLES WITH READ LOCK where there are no backup stages) while every worker runs START TRANSACTION WITH
 * CONSISTENT SNAPSHOT, so all workers read the same instant.
 *
 * Usage: lastline-tsvdump OPTION_FILE CONTROL_FD   (CONTROL_FD: a SOCK_SEQPACKET socket to the coordinator)
 * The option file ([client] group, 0600, removed by the coordinator once READY is read) carries the
 * address and credentials: nothing secret is on the command line.
 *
 * Messages (one datagram each). Coordinator -> worker:
 *   "E" sql                 run a statement, discard any result       -> "OK" | "ERR <errno> <msg>"
 *   "D" <limit:20 digits> <z|n> sql
 *                           stream a SELECT whose LAST column is the server's row hash (decimal);
 *                           every other column is written as one TSV field; z: each part is one zstd
 *                           frame at level 1 with a content checksum (as `zstd -1` writes it), n: raw;
 *                           -> "NEED" (per part) ... "PART <rows> <raw_bytes> <checksum>" (raw: before compression)
 *                              (for a part given with "F": ... "<written bytes> <sha256 hex>" appended)
 *                           -> "DONE <rows> <checksum>" | "ERR <errno> <msg>" | "WARN <n> <msg>"
 *                              | "WFAIL <errno> <strerror>" (writing an "F" part's file failed: disk full, ...)
 *   "O" + one fd (SCM_RIGHTS)   the answer to NEED: where the part's lines go (the write end of a pipe)
 *   "F" + one fd (SCM_RIGHTS)   the same, the part's file itself (a local destination): the worker counts and
 *                           hashes what it writes, so the coordinator needs no pipe, no thread and no copy
 *   "S" <F|O> <AEAD key: 32 bytes> <header: 76 bytes> + one fd
 *                           the same as "F" or "O", the part sealed (lastline-seal/1, storage/sealing.py): the
 *                           worker writes the header the coordinator built, then the part's bytes (compressed or
 *                           not) cut into chunks of the header's chunk size, chunk i sealed with the header's
 *                           cipher (EVP AES-256-GCM or ChaCha20-Poly1305) under the key, nonce i (11 bytes,
 *                           big-endian) | final flag, the header's first 44 bytes as associated data, its 16-byte
 *                           tag after it; every chunk full but the last (0 to the chunk size), which is sealed
 *                           final when the part ends whole, never when it is abandoned (it reads as truncated).
 *                           The key lives in the cipher context for the part only, wiped when it ends or is
 *                           abandoned; an "S" part given with "F" is counted and hashed as stored, header included.
 *                           A header the worker does not take: "ERR 0 a sealed part's ..." (nothing written)
 *   SIGUSR1                 give way: the dump in progress stops at its next row, drains its result and
 *                           answers "ERR 1317 gave way" (its parts are not complete); nothing if none runs
 *   "R" <bytes per second>  pace every later dump: the rows this connection fetches, at most that many
 *                           bytes a second (0: no cap); the server's send blocks while the worker sleeps -> "OK"
 * Worker -> coordinator at start: "READY <connection id> <server version>" or "ERR <errno> <msg>".
 *
 * The dialect (see dialect.py): fields split by TAB, rows ended by LF; in a field `\` is `\\`, TAB is
 * `\t`, LF is `\n`; NULL is `\N`; every other byte as the server sent it (character_set_results=NULL).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mysql.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <zstd.h>

#define MAX_MSG (1 << 20)
#define OUT_CAP (1 << 20)

static MYSQL *db;
static int CTL = -1; /* the control socket, from argv */
static unsigned char outbuf[OUT_CAP];
static size_t outlen;
static int outfd = -1;
static int outerr;
static unsigned long long outbytes;
static EVP_MD_CTX *hctx; /* the part file's sha256 ("F" parts only) */
static int hashing;
static unsigned long long written;
static char part_sha[2 * EVP_MAX_MD_SIZE + 1];

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n >= (int)sizeof msg) n = sizeof msg - 1;
    ssize_t sent;
    do sent = send(CTL, msg, (size_t)n, MSG_NOSIGNAL); while (sent < 0 && errno == EINTR); /* SIGUSR1 */
    if (sent < 0) _exit(3); /* coordinator gone */
}

static void reply_error(void) {
    reply("ERR %u %s", mysql_errno(db), mysql_error(db));
}

static void write_all(const unsigned char *p, size_t n) { /* the bytes as stored */
    if (hashing && n && !outerr) {
        if (EVP_DigestUpdate(hctx, p, n) != 1) outerr = EIO;
        written += n;
    }
    while (n && !outerr) {
        ssize_t w = write(outfd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            outerr = errno;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

/* a sealed part (see "S" above): the chunk pending (the final one is known only when a further byte arrives or the
   part ends) and the cipher context holding the part's key */
#define SEAL_FIELDS 44
#define SEAL_HEADER (SEAL_FIELDS + 32)
#define SEAL_KEY 32
#define SEAL_TAG 16
static EVP_CIPHER_CTX *sctx;
static int sealing;
static unsigned char seal_aad[SEAL_FIELDS];
static unsigned char *sbuf; /* the pending chunk's plaintext */
static size_t scap, schunk, slen;
static unsigned long long sindex;
static unsigned char sealed_out[OUT_CAP];

static void seal_wipe(void) { /* the part ended or was abandoned: its key goes, and the plaintext it held */
    if (sctx) EVP_CIPHER_CTX_reset(sctx);
    if (sbuf) OPENSSL_cleanse(sbuf, slen);
    sealing = 0;
    slen = 0;
}

static void seal_chunk(const unsigned char *p, size_t n, int final) {
    if (outerr) return;
    unsigned char nonce[12] = {0}, tag[SEAL_TAG];
    unsigned long long i = sindex++;
    for (int k = 10; k >= 3; k--, i >>= 8) nonce[k] = (unsigned char)(i & 0xff); /* an index fits in 8 bytes */
    nonce[11] = final ? 1 : 0;
    int len = 0;
    if (EVP_EncryptInit_ex(sctx, NULL, NULL, NULL, nonce) != 1 || EVP_EncryptUpdate(sctx, NULL, &len, seal_aad, SEAL_FIELDS) != 1) {
        outerr = EIO;
        return;
    }
    while (n && !outerr) {
        int take = n > OUT_CAP ? OUT_CAP : (int)n;
        if (EVP_EncryptUpdate(sctx, sealed_out, &len, p, take) != 1) {
            outerr = EIO;
            return;
        }
        write_all(sealed_out, (size_t)len);
        p += take;
        n -= (size_t)take;
    }
    if (outerr) return;
    if (EVP_EncryptFinal_ex(sctx, sealed_out, &len) != 1 || EVP_CIPHER_CTX_ctrl(sctx, EVP_CTRL_AEAD_GET_TAG, SEAL_TAG, tag) != 1) {
        outerr = EIO;
        return;
    }
    write_all(sealed_out, (size_t)len); /* nothing for these stream ciphers */
    write_all(tag, SEAL_TAG);
}

/* the part's bytes as they come, sealed chunk by chunk: a full chunk is sealed (not final) once a byte follows it,
   straight from `p` when nothing is pending */
static void seal_put(const unsigned char *p, size_t n) {
    while (n && !outerr) {
        if (slen == schunk) {
            seal_chunk(sbuf, slen, 0);
            slen = 0;
        } else if (slen == 0 && n > schunk) {
            seal_chunk(p, schunk, 0);
            p += schunk;
            n -= schunk;
        } else {
            size_t take = n < schunk - slen ? n : schunk - slen;
            memcpy(sbuf + slen, p, take);
            slen += take;
            p += take;
            n -= take;
        }
    }
}

/* the part's "S" message (kind, key, header): the cipher keyed, the header written; open_part's -2 if the header is
   not one of lastline-seal/1, -3 if memory ran out. The key is wiped from the message either way. */
static int seal_begin(unsigned char *msg, int n) {
    unsigned char *key = msg + 2, *header = msg + 2 + SEAL_KEY;
    const EVP_CIPHER *cipher = NULL;
    size_t size = 0;
    if (n == 2 + SEAL_KEY + SEAL_HEADER && memcmp(header, "LLSEAL", 6) == 0 && header[6] == 1) {
        cipher = header[7] == 1 ? EVP_aes_256_gcm() : header[7] == 2 ? EVP_chacha20_poly1305() : NULL;
        size = (size_t)header[8] << 24 | (size_t)header[9] << 16 | (size_t)header[10] << 8 | header[11];
    }
    int fail = cipher && size >= 1024 && size <= (64 << 20) ? 0 : -2;
    if (!fail && scap < size) {
        OPENSSL_clear_free(sbuf, scap);
        sbuf = malloc(size);
        scap = sbuf ? size : 0;
    }
    if (!fail && !sctx) sctx = EVP_CIPHER_CTX_new();
    if (!fail && (!sbuf || !sctx || EVP_EncryptInit_ex(sctx, cipher, NULL, NULL, NULL) != 1 ||
                  EVP_CIPHER_CTX_ctrl(sctx, EVP_CTRL_AEAD_SET_IVLEN, 12, NULL) != 1 ||
                  EVP_EncryptInit_ex(sctx, NULL, NULL, key, NULL) != 1))
        fail = -3;
    OPENSSL_cleanse(key, SEAL_KEY);
    if (fail) {
        seal_wipe();
        return fail;
    }
    memcpy(seal_aad, header, SEAL_FIELDS);
    schunk = size;
    slen = 0;
    sindex = 0;
    sealing = 1;
    write_all(header, SEAL_HEADER);
    return 0;
}

/* the bytes of the part as the dump makes them (compressed or not): sealed, or as they are */
static void part_bytes(const unsigned char *p, size_t n) {
    if (sealing)
        seal_put(p, n);
    else
        write_all(p, n);
}

static ZSTD_CCtx *zctx; /* NULL: parts are written raw */
static unsigned char *zbuf;
static size_t zcap;

/* raw bytes out: compressed into the part's frame, or written as they are */
static void emit(const unsigned char *p, size_t n, ZSTD_EndDirective mode) {
    outbytes += n;
    if (!zctx) {
        part_bytes(p, n);
        return;
    }
    ZSTD_inBuffer in = {p, n, 0};
    for (;;) {
        ZSTD_outBuffer out = {zbuf, zcap, 0};
        size_t left = ZSTD_compressStream2(zctx, &out, &in, mode);
        if (ZSTD_isError(left)) {
            outerr = EIO;
            return;
        }
        part_bytes(zbuf, out.pos);
        if (outerr) return;
        if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) return;
    }
}

static void flush_out(void) {
    emit(outbuf, outlen, ZSTD_e_continue);
    outlen = 0;
}

static inline void put(const unsigned char *p, size_t n) {
    if (outlen + n > OUT_CAP) {
        flush_out();
        if (n > OUT_CAP) { /* a big run of plain bytes: straight through */
            emit(p, n, ZSTD_e_continue);
            return;
        }
    }
    memcpy(outbuf + outlen, p, n);
    outlen += n;
}

static inline void put1(unsigned char c) {
    if (outlen == OUT_CAP) flush_out();
    outbuf[outlen++] = c;
}

/* whether any byte of the 8-byte word w is `\\`, TAB or LF (the classic has-zero-byte trick) */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline int has_special(uint64_t w) {
    uint64_t a = w ^ (ONES * 0x5c), b = w ^ (ONES * 0x09), c = w ^ (ONES * 0x0a);
    return (((a - ONES) & ~a) | ((b - ONES) & ~b) | ((c - ONES) & ~c)) & HIGHS ? 1 : 0;
}

/* one field, escaped: a single pass over the value, runs of plain bytes copied as blocks */
static void put_escaped(const unsigned char *s, size_t n) {
    size_t i = 0, run = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!has_special(w)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c == '\\' || c == '\t' || c == '\n') {
            put(s + run, i - run);
            put1('\\');
            put1(c == '\\' ? '\\' : (c == '\t' ? 't' : 'n'));
            run = i + 1;
        }
        i++;
    }
    put(s + run, n - run);
}

static int recv_msg(char *buf, size_t cap, int *fd) {
    struct iovec iov = {buf, cap - 1};
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.b;
    mh.msg_controllen = sizeof u.b;
    ssize_t n;
    do n = recvmsg(CTL, &mh, MSG_CMSG_CLOEXEC); while (n < 0 && errno == EINTR);
    if (n <= 0) return -1; /* coordinator closed: we are done */
    if (mh.msg_flags & MSG_TRUNC) {
        reply("ERR 0 message too long (%zu bytes at most)", cap - 1);
        return -2;
    }
    buf[n] = 0;
    if (fd) *fd = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int got;
            memcpy(&got, CMSG_DATA(c), sizeof got);
            if (fd && *fd < 0) *fd = got; else close(got);
        }
    }
    return (int)n;
}

static void do_exec(const char *sql, size_t len) {
    if (mysql_real_query(db, sql, len)) {
        reply_error();
        return;
    }
    do {
        MYSQL_RES *r = mysql_store_result(db);
        if (r) mysql_free_result(r);
    } while (mysql_next_result(db) == 0);
    if (mysql_errno(db)) reply_error(); else reply("OK");
}

static int compress_parts;

/* the next part's output: 0, or -1 (no output given, or a clear part's setup failed), -2 (a sealed part's message
   this worker does not take), -3 (a sealed part's setup failed: out of memory) */
static int open_part(char *buf) {
    reply("NEED");
    int fd = -1;
    int n = recv_msg(buf, MAX_MSG, &fd);
    if (n < 0) _exit(0);
    int sealed = buf[0] == 'S';
    char kind = sealed ? buf[1] : buf[0]; /* buf[n] is 0 */
    seal_wipe();
    if ((kind != 'O' && kind != 'F') || fd < 0) {
        if (sealed) OPENSSL_cleanse(buf, (size_t)n);
        if (fd >= 0) close(fd);
        return sealed ? -2 : -1;
    }
    outlen = 0;
    outbytes = 0;
    outerr = 0;
    written = 0;
    hashing = kind == 'F';
    if (hashing) {
        if (!hctx) hctx = EVP_MD_CTX_new();
        if (!hctx || EVP_DigestInit_ex(hctx, EVP_sha256(), NULL) != 1) {
            if (sealed) OPENSSL_cleanse(buf, (size_t)n);
            close(fd);
            return sealed ? -3 : -1;
        }
    }
    if (compress_parts) {
        if (!zctx) {
            zctx = ZSTD_createCCtx();
            zcap = ZSTD_CStreamOutSize() * 8;
            zbuf = malloc(zcap);
            if (!zctx || !zbuf) {
                if (sealed) OPENSSL_cleanse(buf, (size_t)n);
                close(fd);
                return sealed ? -3 : -1;
            }
        }
        ZSTD_CCtx_reset(zctx, ZSTD_reset_session_only);
        ZSTD_CCtx_setParameter(zctx, ZSTD_c_compressionLevel, 1);
        ZSTD_CCtx_setParameter(zctx, ZSTD_c_checksumFlag, 1);
    } else if (zctx) {
        ZSTD_freeCCtx(zctx);
        zctx = NULL;
    }
    outfd = fd; /* last: a part whose setup failed leaves no output open */
    int refused = sealed ? seal_begin((unsigned char *)buf, n) : 0; /* writes the header */
    if (refused) {
        close(fd);
        outfd = -1;
        return refused;
    }
    return 0;
}

/* the part ends whole: its last bytes out, a sealed part's final chunk, the file closed */
static void close_part(void) {
    emit(outbuf, outlen, ZSTD_e_end);
    outlen = 0;
    if (sealing && !outerr) seal_chunk(sbuf, slen, 1);
    seal_wipe();
    if (close(outfd) != 0 && !outerr && hashing) outerr = errno; /* a network filesystem may say it only here */
    outfd = -1;
    part_sha[0] = 0;
    if (hashing) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (EVP_DigestFinal_ex(hctx, md, &len) != 1) outerr = EIO;
        for (unsigned int i = 0; i < len; i++) snprintf(part_sha + 2 * i, 3, "%02x", md[i]);
    }
}

/* the part is abandoned: closed as it is (a sealed one without its final chunk: it reads as truncated) */
static void drop_part(void) {
    if (outfd >= 0) close(outfd);
    outfd = -1;
    seal_wipe();
}

/* "PART ...": the part's rows, raw bytes and row-hash sum; for a part file, what was written and its sha256 */
static void reply_part(unsigned long long rows, unsigned long long sum) {
    if (hashing)
        reply("PART %llu %llu %llu %llu %s", rows, outbytes, sum, written, part_sha);
    else
        reply("PART %llu %llu %llu", rows, outbytes, sum);
}

static void report_warnings(unsigned int count) {
    char text[6000] = "";
    size_t used = 0;
    if (mysql_query(db, "SHOW WARNINGS LIMIT 5") == 0) {
        MYSQL_RES *r = mysql_store_result(db);
        MYSQL_ROW row;
        while (r && (row = mysql_fetch_row(r))) {
            int k = snprintf(text + used, sizeof text - used, "%s%s %s: %s", used ? "; " : "", row[0] ? row[0] : "",
                             row[1] ? row[1] : "", row[2] ? row[2] : "");
            if (k < 0 || (size_t)k >= sizeof text - used) break;
            used += (size_t)k;
        }
        if (r) mysql_free_result(r);
    }
    reply("WARN %u %s", count, text);
}

/* the read cap: a token bucket of at most a quarter of a second's bytes, refilled at pace_rate */
static double pace_rate;
static double pace_tokens;
static struct timespec pace_last;
static unsigned long long pace_owed;

static double seconds_since(const struct timespec *t, struct timespec *now) {
    clock_gettime(CLOCK_MONOTONIC, now);
    return (double)(now->tv_sec - t->tv_sec) + (double)(now->tv_nsec - t->tv_nsec) / 1e9;
}

static void pace(unsigned long long bytes) {
    if (pace_rate <= 0) return;
    pace_owed += bytes;
    if (pace_owed < 65536) return;
    struct timespec now;
    double burst = pace_rate / 4 > 65536 ? pace_rate / 4 : 65536;
    pace_tokens += seconds_since(&pace_last, &now) * pace_rate;
    if (pace_tokens > burst) pace_tokens = burst;
    pace_last = now;
    pace_tokens -= (double)pace_owed;
    pace_owed = 0;
    if (pace_tokens < 0) {
        double wait = -pace_tokens / pace_rate;
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static void set_pace(const char *digits) {
    pace_rate = strtod(digits, NULL);
    pace_tokens = 0;
    pace_owed = 0;
    clock_gettime(CLOCK_MONOTONIC, &pace_last);
    reply("OK");
}

static volatile sig_atomic_t give_way;
static void on_give_way(int sig) {
    (void)sig;
    give_way = 1;
}

static void do_dump(char *buf, const char *sql, size_t len, unsigned long long limit) {
    give_way = 0; /* a signal meant for the dump before this one */
    outerr = 0;   /* nor does an earlier dump's failed write, or its kind of part, carry over */
    hashing = 0;
    written = 0;
    if (mysql_real_query(db, sql, len)) {
        reply_error();
        return;
    }
    MYSQL_RES *res = mysql_use_result(db);
    if (!res) {
        reply_error();
        return;
    }
    unsigned int nf = mysql_num_fields(res);
    if (nf < 2) {
        mysql_free_result(res);
        reply("ERR 0 a dump query needs its columns and the row hash");
        return;
    }
    unsigned int data = nf - 1;
    unsigned long long rows = 0, part_rows = 0;
    unsigned long long total_sum = 0, part_sum = 0;
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res))) {
        if (give_way) {
            drop_part();
            mysql_free_result(res); /* reads what is left unpaced (the server may be stopping it already) */
            unsigned int lost = mysql_errno(db);
            if (lost == 2006 || lost == 2013) { /* the connection went while draining: not a yield */
                reply_error();
                return;
            }
            reply("ERR 1317 gave way to a DDL waiting for the table");
            return;
        }
        unsigned long *lengths = mysql_fetch_lengths(res);
        if (pace_rate > 0) {
            unsigned long long row_bytes = nf;
            for (unsigned int i = 0; i < nf; i++) row_bytes += lengths[i];
            pace(row_bytes);
        }
        int opened = outfd < 0 ? open_part(buf) : 0;
        if (opened < 0) {
            mysql_free_result(res);
            if (opened == -2)
                reply("ERR 0 a sealed part's message is not one this worker takes (its kind, or its lastline-seal/1 header)");
            else if (opened == -3)
                reply("ERR 0 could not set up the next part's output (out of memory)");
            else
                reply("ERR 0 expected an output for the next part");
            return;
        }
        for (unsigned int i = 0; i < data; i++) {
            if (i) put1('\t');
            if (!row[i]) {
                put1('\\');
                put1('N');
            } else {
                put_escaped((const unsigned char *)row[i], lengths[i]);
            }
        }
        put1('\n');
        const char *h = row[data];
        if (!h) {
            if (sealing)
                drop_part(); /* never a final chunk for a part that is not whole */
            else
                close_part();
            mysql_free_result(res);
            reply("ERR 0 the row hash was NULL (row %llu of the query)", rows + 1);
            return;
        }
        unsigned long long v = 0;
        for (unsigned long k = 0; k < lengths[data]; k++) v = v * 10 + (unsigned long long)(h[k] - '0');
        part_sum += v;
        rows++;
        part_rows++;
        if (outerr) break;
        if (part_rows == limit) {
            close_part();
            if (outerr) break;
            reply_part(part_rows, part_sum);
            total_sum += part_sum;
            part_rows = part_sum = 0;
        }
    }
    if (outerr) {
        /* the reader is gone: cut the connection rather than read the rest of the result (the server
           stops the query when it can no longer send); this worker cannot be used again */
        int e = outerr;
        drop_part();
        shutdown(mysql_get_socket(db), SHUT_RDWR);
        mysql_free_result(res);
        if (hashing) /* its own file: the destination refused the write */
            reply("WFAIL %d %s", e, strerror(e));
        else
            reply("ERR 2013 writing the chunk failed (%s); the worker's connection was closed", strerror(e));
        _exit(1);
    }
    unsigned int err = mysql_errno(db);
    if (err) {
        char msg[4096];
        snprintf(msg, sizeof msg, "%s", mysql_error(db));
        drop_part();
        mysql_free_result(res);
        reply("ERR %u %s", err, msg);
        return;
    }
    mysql_free_result(res);
    if (outfd >= 0) {
        close_part();
        if (outerr) {
            if (hashing)
                reply("WFAIL %d %s", outerr, strerror(outerr));
            else
                reply("ERR 0 writing the chunk failed: %s", strerror(outerr));
            return;
        }
        reply_part(part_rows, part_sum);
        total_sum += part_sum;
    }
    unsigned int warnings = mysql_warning_count(db);
    if (warnings) {
        report_warnings(warnings);
        return;
    }
    reply("DONE %llu %llu", rows, total_sum);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s OPTION_FILE CONTROL_FD\n", argv[0]);
        return 2;
    }
    CTL = atoi(argv[2]);
    /* no core file, whatever kills it: a sealed part's key and rows are in this process's memory */
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit: write() fails with EFBIG (WFAIL), the process is not killed */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_give_way; /* no SA_RESTART: the pacing sleep ends at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    db = mysql_init(NULL);
    unsigned long packet = 1UL << 30; /* the largest value a server can send */
    unsigned int timeout = 30;
    my_bool no = 0;
    mysql_options(db, MYSQL_READ_DEFAULT_FILE, argv[1]);
    mysql_options(db, MYSQL_READ_DEFAULT_GROUP, "client");
    mysql_options(db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_options(db, MYSQL_OPT_MAX_ALLOWED_PACKET, &packet);
    mysql_options(db, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    mysql_options(db, MYSQL_OPT_LOCAL_INFILE, &no);
    if (!mysql_real_connect(db, NULL, NULL, NULL, NULL, 0, NULL, 0)) {
        reply_error();
        return 1;
    }
    reply("READY %lu %s", mysql_thread_id(db), mysql_get_server_info(db));
    char *buf = malloc(MAX_MSG);
    if (!buf) return 1;
    for (;;) {
        int fd = -1;
        int n = recv_msg(buf, MAX_MSG, &fd);
        if (fd >= 0) close(fd);
        if (n == -1) break;
        if (n == -2) continue;
        if (buf[0] == 'E') {
            do_exec(buf + 1, (size_t)n - 1);
        } else if (buf[0] == 'R' && n > 1 && n < 40) {
            buf[n] = 0;
            set_pace(buf + 1);
        } else if (buf[0] == 'D' && n > 22 && (buf[21] == 'z' || buf[21] == 'n')) {
            char digits[21];
            memcpy(digits, buf + 1, 20);
            digits[20] = 0;
            unsigned long long limit = strtoull(digits, NULL, 10);
            compress_parts = buf[21] == 'z';
            do_dump(buf, buf + 22, (size_t)n - 22, limit ? limit : ~0ULL);
        } else {
            OPENSSL_cleanse(buf, (size_t)n); /* a sealed part's key sent out of turn included */
            reply("ERR 0 unknown command");
        }
    }
    mysql_close(db);
    return 0;
}
