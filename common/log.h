/*  common/log.h: one-line logging for every thread of the server.

    Lines go to stderr as "2026-11-29T09:00:00Z LEVEL [area] message", or
    "2026-11-29T09:00:00Z LEVEL process: [area] message" once the process
    named itself (hostd does: its lines and the server's may share a
    stderr when `agenthold serve` starts it).
    Thread-safe: each line is formatted into a local buffer and written
    with a single write(2). AGENTHOLD_LOG=debug|info|warn|error sets the
    threshold (default info); read once, at the first call. A message
    holds no control character but tab and newline, nor a byte that is
    not UTF-8: they are escaped (common/ident.h, ah_text_escape).     */
#ifndef AH_LOG_H
#define AH_LOG_H

typedef enum { AH_LOG_DEBUG, AH_LOG_INFO, AH_LOG_WARN, AH_LOG_ERROR } ah_log_level_t;

void ah_log(ah_log_level_t level, const char *area, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

//  Names this process in every later line (up to 15 characters). Call it
//  once, before any thread starts.
void ah_log_set_process (const char *name);

#define ah_debug(area, ...) ah_log(AH_LOG_DEBUG, area, __VA_ARGS__)
#define ah_info(area, ...)  ah_log(AH_LOG_INFO, area, __VA_ARGS__)
#define ah_warn(area, ...)  ah_log(AH_LOG_WARN, area, __VA_ARGS__)
#define ah_error(area, ...) ah_log(AH_LOG_ERROR, area, __VA_ARGS__)

#endif
