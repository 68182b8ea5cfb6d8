/*
 * libFuzzer target: the cufile.json parser, and the explain plan computed
 * from whatever it accepts. Properties checked: no crash, no sanitizer
 * report, a rejected file leaves a message, and an accepted file gives a
 * plan whose parts cover each request.
 */
#include "cufile_json.h"
#include "gpufile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gpufile_cufile_config_t c;
	gpufile_plan_t p;
	int rc;

	gpufile__cufile_defaults(&c);
	rc = gpufile__cufile_json_parse((const char *)data, size, "fuzz.json",
	                                &c);
	if (rc) {
		if (!gpufile_errmsg()[0])
			abort();
		return 0;
	}
	for (int i = 0; i < GPUFILE_CUFILE_NKEYS; i++)
		if (c.v[i].is_bool && c.v[i].value != 0 && c.v[i].value != 1)
			abort();
	GPUFILE_INIT(c);
	GPUFILE_INIT(p);
	if (gpufile_explain(1ull << 30, 12345, 1ull << 30, 0, &c, &p) == 0) {
		for (int i = 0; i < p.nentries; i++) {
			const gpufile_plan_entry_t *e = &p.entries[i];
			if (e->parts < 1 ||
			    e->parts * e->part_size < e->request_size ||
			    e->max_transfer > e->part_size)
				abort();
		}
	}
	return 0;
}
