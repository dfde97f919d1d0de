/*
 * lastline's LOAD DATA LOCAL INFILE handler for the loader's connections (built by `make setup` into the
 * venv's lib folder as liblastline-infile.so; logical/format/infile.py installs it on a MySQLdb connection).
 * The loader never runs LOAD DATA LOCAL without it: libmariadb's own handler sends any file the server
 * names, so a server (or a statement) could ask for any file the worker can read.
 *
 * Why it decompresses: with libmariadb's own handler, a zstd chunk reaches the server as
 *   zstd process -> FIFO (raw bytes) -> libmariadb reading the FIFO 4 KiB at a time -> socket;
 * the reader is paced by the server, so every 4 KiB it frees wakes the decompressor again: on 2 cores that
 * ping-pong cost about as much CPU as the decompression itself (bench/restore_cpu_bench.py, with and
 * without LASTLINE_INFILE_LIB=off). This handler reads the FIFO's *compressed* bytes in 256 KiB blocks and
 * decompresses them (libzstd, or zlib for gzip as pigz writes it) straight into libmariadb's send buffer:
 * no decompressor process, and the raw bytes never cross a pipe. Codec `none` copies the bytes as they are.
 *
 * Trust: the caller fills the connection's slot before each statement (infile.Handler.offer): the one path
 * it may open, the codec, and the most bytes it may send (the chunk's raw size in the manifest). A server
 * asking for any other file gets an error, not the file; the offer is used up by the one open it allows; the
 * path is opened without following a link, and must be a FIFO or a regular file. More output than the cap
 * fails the statement, so a small chunk cannot expand without bound. The caller hashes the compressed bytes
 * (the manifest's sha256) on their way into the FIFO, or before it offers a spooled file, so what is
 * decompressed is what was checked. Every error fails the statement with a message starting
 * "lastline-infile: ".
 *
 * A chunk in a local folder is offered as a descriptor instead (infile.Handler.offer_fd): the caller opened the
 * regular file by descriptor from the destination's root with no link followed (storage.file), and the name in
 * the statement is only the offer's token. The handler reads its own duplicate of the descriptor, hashes every
 * compressed byte it reads, and at the end of the file fails the statement unless the sha256 is the manifest's
 * (the rows read before then go with the statement's transaction): no FIFO, no thread and no copy per chunk.
 *
 * lastline_infile_measure runs the same reader over a file to nowhere: the loader proves a spooled chunk of
 * a non-transactional table decompresses within its cap before any byte of it reaches the table.
 */
#include <errno.h>
#include <fcntl.h>
#include <mysql.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <zlib.h>
#include <zstd.h>

#define IN_BLOCK (256 * 1024)
#define PATH_LEN 4096
#define ERR_CODE 2000 /* CR_UNKNOWN_ERROR */

enum { CODEC_NONE = 0, CODEC_ZSTD = 1, CODEC_GZIP = 2 };

typedef struct {
    char expected[PATH_LEN];      /* the one path the next LOAD DATA LOCAL may open ("" once used) */
    int codec;                    /* how its bytes are decompressed */
    unsigned long long max_bytes; /* the most bytes it may give */
    int fd;                       /* >= 0: read (a duplicate of) this descriptor, not the path; -1 once used */
    int check;                    /* 1: what is read must hash to sha256 (checked at its end) */
    unsigned char sha256[32];
    int verified;                 /* set when what was read hashed to sha256, at its end */
    char verdict[512];            /* the handler's last refusal ("" if none): kept even if the server's error hides it */
} infile_slot;

typedef struct {
    int fd, eof, codec;
    unsigned long long max_bytes, total;
    /* zstd */
    size_t last; /* libzstd's last hint: 0 when a frame ended and everything was flushed */
    ZSTD_DCtx *dctx;
    ZSTD_inBuffer in;
    /* gzip */
    z_stream zs;
    int z_ready, member_open; /* member_open: input went into a gzip member that has not ended */
    unsigned char *block;
    EVP_MD_CTX *md; /* while the input's sha256 is still to be checked */
    unsigned char want[32];
    infile_slot *slot; /* the offer's slot (NULL when measuring): told the verdict */
    int failed;        /* once a read failed, every later one fails too */
    char msg[512];
} reader;

/* r->msg = "lastline-infile: what: detail", with every '%' and control byte made '?': the client library uses the
   text as a printf format (my_set_error), and `detail` can be a name the server chose. Also the slot's verdict. */
static int fail(reader *r, const char *what, const char *detail) {
    snprintf(r->msg, sizeof r->msg, "lastline-infile: %s%s%s", what, detail ? ": " : "", detail ? detail : "");
    for (char *p = r->msg; *p; p++)
        if (*p == '%' || (unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    if (r->slot) snprintf(r->slot->verdict, sizeof r->slot->verdict, "%s", r->msg);
    r->failed = 1;
    return -1;
}

/* Read `fd` (ours: closed by reader_close) or else open `path`, with `codec`, giving at most `max_bytes`; 0, or -1
   with r->msg set. */
static int reader_open(reader *r, const char *path, int fd, int codec, unsigned long long max_bytes) {
    struct stat st;
    r->fd = fd;
    r->codec = codec;
    r->max_bytes = max_bytes;
    if (codec != CODEC_NONE && codec != CODEC_ZSTD && codec != CODEC_GZIP) return fail(r, "cannot be sent: unknown codec", NULL);
    r->block = malloc(IN_BLOCK);
    if (!r->block) return fail(r, "cannot be sent: out of memory", NULL);
    if (codec == CODEC_ZSTD && !(r->dctx = ZSTD_createDCtx())) return fail(r, "cannot be sent: out of memory", NULL);
    if (codec == CODEC_GZIP) {
        if (inflateInit2(&r->zs, 16 + MAX_WBITS) != Z_OK) return fail(r, "cannot be sent: out of memory", NULL); /* gzip only */
        r->z_ready = 1;
    }
    if (r->fd < 0) {
        r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (r->fd < 0) return fail(r, "cannot be read: opening it failed", strerror(errno));
    } else if (!r->md) {
        return fail(r, "cannot be sent: a descriptor is offered only with its sha256", NULL);
    }
    if (fstat(r->fd, &st) != 0) return fail(r, "cannot be read", strerror(errno));
    if (!S_ISFIFO(st.st_mode) && !S_ISREG(st.st_mode)) return fail(r, "cannot be sent: it is not a pipe or a regular file", path);
    if (fd >= 0 && !S_ISREG(st.st_mode)) return fail(r, "cannot be sent: the descriptor offered is not a regular file", path);
    return 0;
}

/* Hash `n` bytes just read (n == 0: the end, where the digest must be the manifest's). 0, or -1 with r->msg set. */
static int hashed(reader *r, const void *p, ssize_t n) {
    if (!r->md) return 0;
    if (n > 0) return EVP_DigestUpdate(r->md, p, (size_t)n) == 1 ? 0 : fail(r, "cannot be hashed", NULL);
    unsigned char got[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    int ok = EVP_DigestFinal_ex(r->md, got, &len) == 1 && len == sizeof r->want && memcmp(got, r->want, len) == 0;
    EVP_MD_CTX_free(r->md);
    r->md = NULL;
    if (!ok) return fail(r, "is corrupt: its sha256 differs from the manifest's", NULL);
    if (r->slot) r->slot->verified = 1;
    return 0;
}

static ssize_t read_block(reader *r) {
    ssize_t n;
    do n = read(r->fd, r->block, IN_BLOCK); while (n < 0 && errno == EINTR);
    if (n < 0) return fail(r, "cannot be read: reading it failed", strerror(errno));
    if (hashed(r, r->block, n) != 0) return -1;
    return n;
}

/* The next block of compressed input: its size, 0 at the end (then eof is set, and stays), -1 on an error. */
static ssize_t next_block(reader *r) {
    if (r->eof) return 0;
    ssize_t n = read_block(r);
    if (n == 0) r->eof = 1;
    return n;
}

static long read_none(reader *r, char *buf, size_t len) {
    ssize_t n;
    do n = read(r->fd, buf, len); while (n < 0 && errno == EINTR);
    if (n < 0) return fail(r, "cannot be read: reading it failed", strerror(errno));
    if (hashed(r, buf, n) != 0) return -1;
    return (long)n;
}

static long read_zstd(reader *r, char *buf, size_t len) {
    ZSTD_outBuffer out = {buf, len, 0};
    while (out.pos < out.size) {
        size_t out_before = out.pos, in_before = r->in.pos;
        size_t ret = ZSTD_decompressStream(r->dctx, &out, &r->in);
        if (ZSTD_isError(ret)) return fail(r, "cannot be decompressed", ZSTD_getErrorName(ret));
        if (out.pos > out_before || r->in.pos > in_before) { /* progress: go on */
            r->last = ret; /* (without progress, ret only hints at the size of a next frame's header) */
            continue;
        }
        ssize_t n = next_block(r);
        if (n < 0) return -1;
        if (n == 0) break;
        r->in.src = r->block;
        r->in.size = (size_t)n;
        r->in.pos = 0;
    }
    if (out.pos == 0 && r->eof && r->last != 0) return fail(r, "cannot be decompressed", "it ends inside a zstd frame");
    return (long)out.pos;
}

/* gzip as pigz and gzip write it: one member or several back to back (each is inflated in turn). */
static long read_gzip(reader *r, char *buf, size_t len) {
    r->zs.next_out = (Bytef *)buf;
    r->zs.avail_out = (uInt)len;
    while (r->zs.avail_out > 0) {
        if (r->zs.avail_in == 0) {
            ssize_t n = next_block(r);
            if (n < 0) return -1;
            if (n == 0) break;
            r->zs.next_in = r->block;
            r->zs.avail_in = (uInt)n;
        }
        if (!r->member_open) { /* input after a member's end: the next member */
            if (inflateReset(&r->zs) != Z_OK) return fail(r, "cannot be decompressed", "zlib cannot start a member");
            r->member_open = 1;
        }
        int ret = inflate(&r->zs, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) {
            r->member_open = 0;
            continue;
        }
        if (ret == Z_BUF_ERROR && r->zs.avail_in == 0) continue; /* it needs more input */
        if (ret != Z_OK) return fail(r, "cannot be decompressed", r->zs.msg ? r->zs.msg : zError(ret));
    }
    long produced = (long)(len - r->zs.avail_out);
    if (produced == 0 && r->eof && r->member_open) return fail(r, "cannot be decompressed", "it ends inside a gzip member");
    return produced;
}

/* Up to `len` bytes of output; 0 at the end; -1 with r->msg set. Never more than max_bytes in all. */
static long reader_read(reader *r, char *buf, size_t len) {
    if (r->failed) return -1;
    /* ask for one byte beyond the cap at most: enough to tell "more than declared" without making it */
    unsigned long long room = r->max_bytes - r->total;
    if (room < len) len = (size_t)room + 1;
    long n = r->codec == CODEC_NONE ? read_none(r, buf, len) : r->codec == CODEC_ZSTD ? read_zstd(r, buf, len) : read_gzip(r, buf, len);
    if (n < 0) return -1;
    r->total += (unsigned long long)n;
    if (r->total > r->max_bytes) {
        snprintf(r->msg, sizeof r->msg, "lastline-infile: decompresses to more than its declared %llu bytes", r->max_bytes);
        return -1;
    }
    return n;
}

static void reader_close(reader *r) {
    if (r->fd >= 0) close(r->fd);
    if (r->md) EVP_MD_CTX_free(r->md);
    ZSTD_freeDCtx(r->dctx);
    if (r->z_ready) inflateEnd(&r->zs);
    free(r->block);
}

static int li_init(void **ptr, const char *filename, void *userdata) {
    infile_slot *slot = userdata;
    infile_slot offer;
    int matches = slot && slot->expected[0] && strcmp(filename, slot->expected) == 0;
    if (slot) { /* the offer is used up (or withdrawn) here, whatever follows: nothing of it serves a later request */
        memcpy(&offer, slot, sizeof offer);
        slot->expected[0] = '\0';
        slot->fd = -1;
        slot->check = 0;
        slot->verified = 0;
        slot->verdict[0] = '\0';
    }
    reader *r = calloc(1, sizeof *r);
    *ptr = r;
    if (!r) return 1;
    r->fd = -1;
    r->slot = slot;
    if (!matches) {
        fail(r, "cannot be sent: the server asked for a file this connection did not offer", filename);
        return 1;
    }
    if (offer.check && offer.fd < 0) {
        fail(r, "cannot be sent: a sha256 is offered only with a descriptor", NULL);
        return 1;
    }
    int fd = -1;
    if (offer.check) {
        memcpy(r->want, offer.sha256, sizeof r->want);
        if (!(r->md = EVP_MD_CTX_new()) || EVP_DigestInit_ex(r->md, EVP_sha256(), NULL) != 1) {
            fail(r, "cannot be hashed", NULL);
            return 1;
        }
    }
    if (offer.fd >= 0) {
        fd = fcntl(offer.fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            fail(r, "cannot be read: duplicating its descriptor failed", strerror(errno));
            return 1;
        }
    }
    return reader_open(r, filename, fd, offer.codec, offer.max_bytes) != 0;
}

static int li_read(void *ptr, char *buf, unsigned int len) {
    return (int)reader_read(ptr, buf, len);
}

static void li_end(void *ptr) {
    reader *r = ptr;
    if (!r) return;
    reader_close(r);
    free(r);
}

static int li_error(void *ptr, char *buf, unsigned int len) {
    reader *r = ptr;
    snprintf(buf, len, "%s", r && r->msg[0] ? r->msg : "lastline-infile: cannot be sent: out of memory");
    return ERR_CODE;
}

/* Install the handler on a connection; `slot` (kept alive by the caller) is filled before each statement. */
void lastline_infile_install(MYSQL *mysql, infile_slot *slot) {
    mysql_set_local_infile_handler(mysql, li_init, li_read, li_end, li_error, slot);
}

size_t lastline_infile_path_len(void) { return PATH_LEN; }

size_t lastline_infile_slot_size(void) { return sizeof(infile_slot); }

/* Read the file at `path` with `codec` to nowhere: its output size, or -1 with the reason in `msg`. */
long long lastline_infile_measure(const char *path, int codec, unsigned long long max_bytes, char *msg, size_t msg_len) {
    reader r;
    long long total = -1;
    memset(&r, 0, sizeof r);
    r.fd = -1;
    char *buf = malloc(IN_BLOCK);
    if (!buf) fail(&r, "cannot be read: out of memory", NULL);
    else if (reader_open(&r, path, -1, codec, max_bytes) == 0) {
        long n;
        while ((n = reader_read(&r, buf, IN_BLOCK)) > 0) {
        }
        if (n == 0) total = (long long)r.total;
    }
    if (total < 0) snprintf(msg, msg_len, "%s", r.msg);
    reader_close(&r);
    free(buf);
    return total;
}
