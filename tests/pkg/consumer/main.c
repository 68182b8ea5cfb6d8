/*
 * A program built against an installed gpufile (tests/pkg/install_test.sh):
 * the header it was compiled with and the library it runs with agree, and a
 * read through the library returns the file's bytes.
 * Usage: consumer FILE. Prints "consumer ok VERSION". Exit 0 pass, 1 fail.
 */
#include <gpufile.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	static const char text[] = "gpufile install test\n";
	char buf[sizeof(text)] = {0};
	gpufile_t *h = NULL;
	ssize_t n;
	FILE *f;
	int rc;

	if (argc != 2)
		return 1;
	if (strcmp(gpufile_version(), GPUFILE_VERSION_STRING) != 0) {
		fprintf(stderr, "consumer: header %s, library %s\n",
		        GPUFILE_VERSION_STRING, gpufile_version());
		return 1;
	}
	f = fopen(argv[1], "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(argv[1]);
		return 1;
	}
	rc = gpufile_open(&h, argv[1], "r");
	if (rc) {
		fprintf(stderr, "consumer: gpufile_open: %s\n",
		        gpufile_errmsg());
		return 1;
	}
	n = gpufile_pread(h, buf, sizeof(text) - 1, 0);
	gpufile_close(h);
	if (n != (ssize_t)sizeof(text) - 1 || memcmp(buf, text, (size_t)n)) {
		fprintf(stderr, "consumer: read %zd bytes: %s\n", n,
		        n < 0 ? gpufile_errmsg() : "wrong bytes");
		return 1;
	}
	printf("consumer ok %s (%s)\n", gpufile_version(), gpufile_features());
	return 0;
}
