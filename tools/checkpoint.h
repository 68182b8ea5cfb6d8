/*
 * What `gpufile load` loads: the arguments expanded into safetensors
 * files as the Python binding's load_checkpoint() expands them.
 */
#ifndef GPUFILE_TOOLS_CHECKPOINT_H
#define GPUFILE_TOOLS_CHECKPOINT_H

struct checkpoint_files {
	char **paths; /* each allocated */
	int count, cap;
};

/*
 * Appends the safetensors files arg names to files:
 *   - a folder: its *.safetensors.index.json when it has one (two or
 *     more are an error naming them), else its *.safetensors files in
 *     name order (none is an error);
 *   - a local *.json file: an index (model.safetensors.index.json; a
 *     regular file, anything else is refused unopened): the
 *     shards its "weight_map" names, each once, in the order they first
 *     appear, in the index's folder (a shard named by an absolute path or
 *     through ".." is refused);
 *   - anything else (a .safetensors file, a URL) as it is.
 * Returns 0, or EXIT_RUNTIME after a message naming the file at fault.
 */
int checkpoint_expand(const char *cmd, const char *arg,
                      struct checkpoint_files *files);

/* Frees what checkpoint_expand() appended. */
void checkpoint_files_free(struct checkpoint_files *files);

#endif
