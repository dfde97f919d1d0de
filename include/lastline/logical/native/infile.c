/*
 * lastline's LOAD DATA LOCAL INFILE handler for the loader's connections (built by `make setup` into the
 * venv's lib folder as liblastline-infile.so; logical/infile.py installs it on a MySQLdb connection).
 *
 * Why: with libmariadb's own handler, a zstd chunk reaches the server as
 *   zstd process -> FIFO (raw bytes) -> libmariadb reading the FIFO 4 KiB at a time -> socket;
 * the reader is paced by the server, so every 4 KiB it frees wakes the decompressor again: on 2 cores that
 * ping-pong cost about as much CPU as the decompression itself (bench/restore_cpu_bench.py, with and
 * without LASTLINE_INFILE_LIB=off). This handler reads the FIFO's *compressed* bytes
 * in 256 KiB blocks and decompresses them with libzstd straight into libmariadb's send buffer: no
 * decompressor process, and the raw bytes never cross a pipe.
 *
 * Trust: it opens only the one path the caller offered for the next statement (the slot it fills before each
 * statement: infile.Handler.offer); a server asking for any other file gets an error, not the file. What
 * it reads is always zstd (the frames' content checksums are verified by libzstd). The caller hashes
 * the compressed bytes it writes into the FIFO (the manifest's sha256), so what is decompressed is what was
 * checked. A decompression error fails the statement with a message starting "lastline-infile: ".
 */
#include <errno.h>
#include <fcntl.h>
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#define IN_BLOCK (256 * 1024)
#define PATH_LEN 4096
#define ERR_CODE 2000 /* CR_UNKNOWN_ERROR */

typedef struct {
    char expected[PATH_LEN]; /* the one path the next LOAD DATA LOCAL may open */
} infile_slot;

typedef struct {
    int fd, eof;
    size_t last; /* libzstd's last hint: 0 when a frame ended and everything was flushed */
    ZSTD_DCtx *dctx;
    ZSTD_inBuffer in;
    unsigned char *block;
    char msg[512];
} reader;

static int fail(reader *r, const char *what, const char *detail) {
    snprintf(r->msg, sizeof r->msg, "lastline-infile: %s%s%s", what, detail ? ": " : "", detail ? detail : "");
    return -1;
}

static int li_init(void **ptr, const char *filename, void *userdata) {
    reader *r = calloc(1, sizeof *r);
    const infile_slot *slot = userdata;
    *ptr = r;
    if (!r) return 1;
    r->fd = -1;
    if (!slot || !slot->expected[0] || strcmp(filename, slot->expected) != 0) {
        fail(r, "cannot be sent: the server asked for a file this connection did not offer", filename);
        return 1;
    }
    r->block = malloc(IN_BLOCK);
    r->dctx = ZSTD_createDCtx();
    if (!r->block || !r->dctx) {
        fail(r, "cannot be sent: out of memory", NULL);
        return 1;
    }
    r->fd = open(filename, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        fail(r, "cannot be read: opening its pipe failed", strerror(errno));
        return 1;
    }
    return 0;
}

static ssize_t read_block(reader *r) {
    ssize_t n;
    do n = read(r->fd, r->block, IN_BLOCK); while (n < 0 && errno == EINTR);
    if (n < 0) return fail(r, "cannot be read: reading its pipe failed", strerror(errno));
    return n;
}

static int li_read(void *ptr, char *buf, unsigned int len) {
    reader *r = ptr;
    ZSTD_outBuffer out = {buf, len, 0};
    while (out.pos < out.size) {
        size_t out_before = out.pos, in_before = r->in.pos;
        size_t ret = ZSTD_decompressStream(r->dctx, &out, &r->in);
        if (ZSTD_isError(ret)) return fail(r, "cannot be decompressed", ZSTD_getErrorName(ret));
        if (out.pos > out_before || r->in.pos > in_before) { /* progress: go on */
            r->last = ret; /* (without progress, ret only hints at the size of a next frame's header) */
            continue;
        }
        if (r->eof) break;
        ssize_t n = read_block(r);
        if (n < 0) return -1;
        if (n == 0) {
            r->eof = 1;
            break;
        }
        r->in.src = r->block;
        r->in.size = (size_t)n;
        r->in.pos = 0;
    }
    if (out.pos == 0 && r->eof && r->last != 0) return fail(r, "cannot be decompressed", "it ends inside a zstd frame");
    return (int)out.pos;
}

static void li_end(void *ptr) {
    reader *r = ptr;
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    ZSTD_freeDCtx(r->dctx);
    free(r->block);
    free(r);
}

static int li_error(void *ptr, char *buf, unsigned int len) {
    reader *r = ptr;
    snprintf(buf, len, "%s", r && r->msg[0] ? r->msg : "lastline-infile: cannot be sent: out of memory");
    return ERR_CODE;
}

/* Install the handler on a connection; `slot` (PATH_LEN bytes, kept alive by the caller) holds the path. */
void lastline_infile_install(MYSQL *mysql, infile_slot *slot) {
    mysql_set_local_infile_handler(mysql, li_init, li_read, li_end, li_error, slot);
}

size_t lastline_infile_path_len(void) { return PATH_LEN; }
