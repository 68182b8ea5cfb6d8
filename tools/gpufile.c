/* Placeholder until the command-line tool lands. */
#include "commands.h"
#include "gpufile.h"

#include <stdio.h>

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	puts(gpufile_version());
	return 0;
}
