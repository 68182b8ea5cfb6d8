/*
 * The node view of gpufile stats: the counters of every gpufile process
 * of this user (of the node, for root) in the OpenMetrics text format
 * (gpufile stats --openmetrics), and an exporter that answers
 * GET /metrics with it (gpufile stats --serve ADDR:PORT).
 */
#ifndef GPUFILE_TOOLS_METRICS_H
#define GPUFILE_TOOLS_METRICS_H

#include <stdio.h>

/* Writes the OpenMetrics text ("# EOF" last) of process pid, or of every
 * process gpufile_stats_list() finds when pid is 0, to out. Processes
 * that end or cannot be read meanwhile are left out. Returns 0, -ENOMEM,
 * or -EIO when out could not be written. */
int metrics_write(FILE *out, int pid);

/* gpufile stats --openmetrics: metrics_write() to stdout. Returns the
 * exit status. */
int metrics_print(const char *cmd, int pid);

/* gpufile stats --serve ADDR: listens on addr ("PORT", ":PORT",
 * "HOST:PORT" or "[IPV6]:PORT"; no host means 127.0.0.1; port 0 takes a
 * free one) and answers GET /metrics with metrics_write(pid) until
 * killed. A client that has not sent its request, or not taken the
 * answer, within timeout seconds is dropped; clients are served side by
 * side, so a slow one holds up no other. Prints the URL it serves on
 * stdout. Returns the exit status: 2 for an address that is not one, 1
 * when it cannot listen. */
int metrics_serve(const char *cmd, int pid, const char *addr, double timeout);

#endif
