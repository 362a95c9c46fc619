/* deck_keys.c: the one table of input-deck keys. Add a key here and it is parsed,
 * checked, documented by --help-deck and written to the resolved deck. */
#include "deck.h"

#define BIG 1e18
#define K(sec, name, type, def, lo, hi, choices, help) \
    { sec, name, type, def, lo, hi, choices, help }

const tr_key_spec tr_deck_keys[] = {
    K("model", "name", TR_KEY_CHOICE, "mlp", 0, 0, "mlp|cnn|gpt", "compiled-in model to train (trainer --list-models)"),
    K("model", "hidden", TR_KEY_INTLIST, "256,256", 1, 65536, 0, "mlp: widths of the hidden layers, e.g. 256,256"),
    K("model", "classes", TR_KEY_INT, "10", 2, 65536, 0, "number of output classes; labels must lie in [0, classes)"),
    K("model", "n_layer", TR_KEY_INT, "12", 1, 48, 0, "gpt: transformer blocks"),
    K("model", "n_head", TR_KEY_INT, "12", 1, 1024, 0, "gpt: attention heads (must divide n_embd)"),
    K("model", "n_embd", TR_KEY_INT, "768", 8, 65536, 0, "gpt: width of the residual stream"),
    K("model", "seq_len", TR_KEY_INT, "1024", 1, 65536, 0, "gpt: context length in tokens (also the size of the position table)"),
    K("model", "vocab_size", TR_KEY_INT, "50257", 2, 1 << 24, 0, "gpt: vocabulary size (GPT-2's BPE: 50257; bytes: 256); token files must fit in it"),
    K("model", "embd_pdrop", TR_KEY_FLOAT, "0", 0, 0.95, 0, "gpt: dropout probability of the embeddings' sum (Hugging Face's embd_pdrop; GPT-2 was trained with 0.1); training steps only"),
    K("model", "attn_pdrop", TR_KEY_FLOAT, "0", 0, 0.95, 0, "gpt: dropout probability of attention's probabilities (attn_pdrop); training steps only"),
    K("model", "resid_pdrop", TR_KEY_FLOAT, "0", 0, 0.95, 0, "gpt: dropout probability of each attention and MLP output before it is added to the residual stream (resid_pdrop); training steps only"),
    K("model", "vocab_pad", TR_KEY_INT, "64", 1, 4096, 0, "gpt: pad the embedding/logit rows to a multiple of this for speed; padded logits never touch the loss"),

    K("data", "format", TR_KEY_CHOICE, "idx", 0, 0, "idx|tokens|random_tokens", "idx = images and labels in MNIST's IDX format (gzipped or not); tokens = token files from the tokenize tool; random_tokens = uniform random tokens, for benchmarks only"),
    K("data", "train_images", TR_KEY_PATH, "", 0, 0, 0, "training images (IDX3 ubyte, .gz allowed)"),
    K("data", "train_labels", TR_KEY_PATH, "", 0, 0, 0, "training labels (IDX1 ubyte, .gz allowed)"),
    K("data", "test_images", TR_KEY_PATH, "", 0, 0, 0, "held-out images for evaluation"),
    K("data", "test_labels", TR_KEY_PATH, "", 0, 0, 0, "held-out labels for evaluation"),
    K("data", "train_limit", TR_KEY_INT, "0", 0, BIG, 0, "use only the first N training samples (0 = all)"),
    K("data", "train_tokens", TR_KEY_PATH, "", 0, 0, 0, "tokens: training token file (scripts/prepare_text.sh, or the tokenize tool)"),
    K("data", "val_tokens", TR_KEY_PATH, "", 0, 0, 0, "tokens: validation token file"),
    K("data", "val_limit", TR_KEY_INT, "0", 0, BIG, 0, "tokens: evaluate on at most the first N validation windows (0 = all; random_tokens: 0 = one global batch)"),
    K("data", "unigram_baseline", TR_KEY_BOOL, "true", 0, 0, 0, "tokens: print the validation perplexity of the training set's unigram distribution, the bar a language model must clear"),
    K("data", "tokenizer", TR_KEY_CHOICE, "gpt2", 0, 0, "gpt2|bytes", "how [sample] text is encoded and decoded: gpt2 = GPT-2's BPE (encoder, merges), bytes = one token per byte"),
    K("data", "encoder", TR_KEY_PATH, "data/gpt2/encoder.json", 0, 0, 0, "gpt2 tokenizer: encoder.json (scripts/fetch_gpt2_bpe.sh)"),
    K("data", "merges", TR_KEY_PATH, "data/gpt2/vocab.bpe", 0, 0, 0, "gpt2 tokenizer: vocab.bpe"),
    K("data", "shuffle", TR_KEY_BOOL, "true", 0, 0, 0, "reshuffle the training set every epoch (seeded, same on every rank count)"),
    K("data", "prefetch", TR_KEY_BOOL, "true", 0, 0, 0, "prepare the next batch in a background thread"),

    K("train", "seed", TR_KEY_INT, "1234", 0, 4294967295.0, 0, "seed of initialisation and data order"),
    K("train", "epochs", TR_KEY_INT, "1", 0, 1000000, 0, "passes over the training set (used when steps = 0)"),
    K("train", "steps", TR_KEY_INT, "0", 0, BIG, 0, "optimizer steps to run; 0 = epochs x (samples / batch_size)"),
    K("train", "batch_size", TR_KEY_INT, "128", 1, 1 << 24, 0, "global batch: samples per optimizer step over all ranks"),
    K("train", "recompute", TR_KEY_CHOICE, "none", 0, 0, "none|block", "gpt: activation recomputation; block = keep only each block's input and recompute the block in backward (less memory, about a third more compute)"),
    K("train", "precision", TR_KEY_CHOICE, "fp32", 0, 0, "fp32|bf16-mixed|fp16-mixed", "bf16-mixed / fp16-mixed: parameters, activations and their gradients stored in bf16 / fp16, fp32 master weights and optimizer state, math in fp32; fp16 needs loss scaling (loss_scale)"),
    K("train", "loss_scale", TR_KEY_FLOAT, "0", 0, 1e30, 0, "fp16-mixed: 0 = dynamic loss scaling (start at 65536, halve and skip the step when gradients overflow, double after loss_scale_window good steps); > 0 = this fixed scale"),
    K("train", "loss_scale_window", TR_KEY_INT, "1000", 1, BIG, 0, "fp16-mixed, dynamic: good steps in a row before the loss scale doubles"),
    K("train", "micro_batches", TR_KEY_INT, "1", 1, 65536, 0, "split each rank's batch into this many micro-batches and accumulate gradients"),
    K("train", "eval_every", TR_KEY_INT, "0", 0, BIG, 0, "evaluate on the test split every N steps (0 = only at the end)"),
    K("train", "eval_batch_size", TR_KEY_INT, "1000", 1, 1 << 24, 0, "samples per evaluation batch over all ranks"),
    K("train", "log_every", TR_KEY_INT, "10", 1, BIG, 0, "write a metrics.csv row every N steps (the progress line keeps its own pace: run.progress)"),

    K("optim", "name", TR_KEY_CHOICE, "sgd", 0, 0, "sgd|adamw", "optimizer"),
    K("optim", "lr", TR_KEY_FLOAT, "0.05", 0, 1e6, 0, "peak learning rate"),
    K("optim", "momentum", TR_KEY_FLOAT, "0.9", 0, 1, 0, "sgd: momentum (0 = plain SGD)"),
    K("optim", "weight_decay", TR_KEY_FLOAT, "0", 0, 1e6, 0, "sgd: L2 added to the gradient; adamw: decoupled decay"),
    K("optim", "beta1", TR_KEY_FLOAT, "0.9", 0, 0.999999, 0, "adamw: first-moment decay"),
    K("optim", "beta2", TR_KEY_FLOAT, "0.999", 0, 0.999999999, 0, "adamw: second-moment decay"),
    K("optim", "eps", TR_KEY_FLOAT, "1e-8", 1e-30, 1, 0, "adamw: denominator epsilon"),
    K("optim", "schedule", TR_KEY_CHOICE, "constant", 0, 0, "constant|cosine|linear", "learning-rate schedule after the linear warmup: constant, cosine decay to min_lr, or linear decay to min_lr (fine-tuning's usual one)"),
    K("optim", "warmup_steps", TR_KEY_INT, "0", 0, BIG, 0, "steps of linear warmup from 0 to lr"),
    K("optim", "min_lr", TR_KEY_FLOAT, "0", 0, 1e6, 0, "cosine, linear: learning rate at the last step"),
    K("optim", "clip_grad_norm", TR_KEY_FLOAT, "0", 0, 1e12, 0, "clip gradients to this global L2 norm (0 = off)"),

    K("parallel", "dp", TR_KEY_INT, "0", 0, 1 << 24, 0, "data-parallel ranks; 0 = all ranks / (tp x pp)"),
    K("parallel", "tp", TR_KEY_INT, "1", 1, 1 << 16, 0, "gpt: tensor-parallel ranks (Megatron-style: heads, MLP columns and the vocabulary split; must divide n_head); consecutive ranks"),
    K("parallel", "pp", TR_KEY_INT, "1", 1, 1 << 16, 0, "gpt: pipeline stages (blocks split by cost; embedding on the first, head on the last; at most n_layer)"),
    K("parallel", "schedule", TR_KEY_CHOICE, "1f1b", 0, 0, "1f1b|gpipe", "pipeline schedule over [train] micro_batches: 1f1b keeps at most pp micro-batches of activations per stage, gpipe all of them"),
    K("parallel", "zero", TR_KEY_INT, "0", 0, 2, 0, "sharded optimizer over the data-parallel ranks: 0 = off, 1 = optimizer state sharded (gradients reduced to their owner, parameters all-gathered), 2 = also the accumulated gradients"),
    K("parallel", "shm_allreduce", TR_KEY_BOOL, "true", 0, 0, 0, "on CPUs: all-reduce gradients (and tp activations) through a shared-memory window when every rank of the group runs on one node; false = MPI_Allreduce"),
    K("parallel", "bucket_kib", TR_KEY_INT, "256", 4, 1 << 20, 0, "gradient all-reduce bucket size in KiB; each bucket starts as soon as backward fills it (MPI: groups across nodes, or shm_allreduce = false)"),

    K("checkpoint", "dir", TR_KEY_STRING, "", 0, 0, 0, "checkpoint directory; empty = <run dir>/checkpoints"),
    K("checkpoint", "every", TR_KEY_INT, "0", 0, BIG, 0, "write a checkpoint every N steps (0 = only at the end)"),
    K("checkpoint", "keep", TR_KEY_INT, "3", 0, 1000000, 0, "keep the newest N checkpoints, delete older ones (0 = keep all)"),
    K("checkpoint", "at_start", TR_KEY_BOOL, "false", 0, 0, 0, "also write the initial state (step 0) before training"),
    K("checkpoint", "at_end", TR_KEY_BOOL, "true", 0, 0, 0, "write a checkpoint when training ends"),
    K("checkpoint", "collective_io", TR_KEY_BOOL, "false", 0, 0, 0, "tensor data through MPI-IO collective buffering (true) or each rank writing its contiguous part directly (false: faster on a local disk)"),
    K("checkpoint", "resume", TR_KEY_STRING, "auto", 0, 0, 0, "auto = newest valid checkpoint in dir, else start fresh; none; or a checkpoint file"),
    K("checkpoint", "init_from", TR_KEY_PATH, "", 0, 0, 0, "start from the model weights of this checkpoint (any layout or optimizer; e.g. GPT-2's published weights converted by tools/gpt2_hf.py) instead of a random initialisation, with a fresh optimizer at step 0; a checkpoint that resume finds comes first, so a preempted run continues from its own"),

    K("sample", "prompt", TR_KEY_STRING, "The", 0, 0, 0, "gpt: text to continue after training (encoded with [data] tokenizer)"),
    K("sample", "length", TR_KEY_INT, "0", 0, 1 << 20, 0, "gpt: tokens to generate after training and print (0 = none)"),
    K("sample", "top_k", TR_KEY_INT, "1", 1, 1 << 24, 0, "gpt: draw each token from the k most likely (1 = greedy)"),
    K("sample", "top_p", TR_KEY_FLOAT, "1", 1e-6, 1, 0, "gpt: of the top_k, draw from the fewest most likely whose probability reaches this (nucleus sampling; 1 = all top_k)"),
    K("sample", "temperature", TR_KEY_FLOAT, "1", 1e-3, 100, 0, "gpt: divide logits by this before top-k sampling"),

    K("run", "dir", TR_KEY_STRING, "runs/default", 0, 0, 0, "run directory (created if missing): resolved deck, metrics.csv, summary.json"),
    K("run", "stop_after_steps", TR_KEY_INT, "0", 0, BIG, 0, "checkpoint and exit 75 after this many steps of this session (0 = off): run a long job in slices"),
    K("run", "max_minutes", TR_KEY_FLOAT, "0", 0, 1e9, 0, "checkpoint and exit 75 once this session has run this long (0 = off): stay inside a wall-clock limit"),
    K("run", "hang_minutes", TR_KEY_FLOAT, "30", 0, 1e9, 0, "end the job (exit 71) when a rank has made no progress (no training step, evaluation batch, checkpoint piece or sampled token) for this long (0 = off): a hung rank, GPU or link does not hold the nodes until the time limit"),
    K("run", "progress", TR_KEY_CHOICE, "auto", 0, 0, "auto|tty|lines|off", "progress display: auto = in place on a terminal, plain lines otherwise (the first step, about 20 a run, and at least one a minute)"),

    K("system", "device", TR_KEY_CHOICE, "cpu", 0, 0, "cpu|cuda|cpu-guarded", "where the math runs: cpu, or cuda (one GPU per rank, NCCL between them); cpu-guarded = the CPU with the model's memory readable only by kernels, transfers and collectives, as on a GPU (a check of the GPU code path; slow, for tests)"),
    K("system", "peak_gflops", TR_KEY_FLOAT, "0", 0, 1e12, 0, "peak GFLOP/s of one rank's device for MFU; 0 = the device's figure: a short GEMM calibration on a CPU, the datasheet's dense peak for the run's precision on a listed GPU, else a measured GEMM"),
    K("system", "threads", TR_KEY_INT, "0", 0, 1024, 0, "threads per rank; 0 = cores of the node / ranks on the node"),
};

const int tr_deck_nkeys = (int)(sizeof tr_deck_keys / sizeof tr_deck_keys[0]);
