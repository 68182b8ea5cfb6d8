/*
 * The subcommands of the gpufile tool. Each takes the arguments after the
 * subcommand's name (argv[0] is the subcommand) and returns the exit
 * status: 0 ok, 1 I/O or runtime error, 2 usage error. Every subcommand
 * answers --help. They use only the public API (gpufile.h).
 */
#ifndef GPUFILE_TOOLS_COMMANDS_H
#define GPUFILE_TOOLS_COMMANDS_H

int cmd_read(int argc, char **argv);    /* tools/cmd_read.c */
int cmd_write(int argc, char **argv);   /* tools/cmd_write.c */
int cmd_config(int argc, char **argv);  /* tools/cmd_config.c */
int cmd_stats(int argc, char **argv);   /* tools/cmd_stats.c */
int cmd_check(int argc, char **argv);   /* tools/cmd_check.c */
int cmd_explain(int argc, char **argv); /* tools/cmd_explain.c */
int cmd_cache(int argc, char **argv);   /* tools/cmd_cache.c */
int cmd_load(int argc, char **argv);    /* tools/cmd_load.c */
int cmd_bench(int argc, char **argv);   /* tools/cmd_bench.c */

#endif
