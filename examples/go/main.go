// Command stream streams a completion: stream [MODEL] [PROMPT] [MAX_TOKENS]. MODEL defaults to
// $MOE_MODEL, then to the model bundled with the build (set at link time in bundledModel).
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/libmoe/moe"
)

var bundledModel = "" // -ldflags "-X main.bundledModel=PATH"

func main() {
	path := os.Getenv("MOE_MODEL")
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if _, err := os.Stat(bundledModel); path == "" && bundledModel != "" && err == nil {
		path = bundledModel
	}
	if path == "" {
		fmt.Fprintln(os.Stderr, "usage: stream MODEL [PROMPT] [MAX_TOKENS]")
		os.Exit(2)
	}
	prompt := "Once upon a time"
	if len(os.Args) > 2 {
		prompt = os.Args[2]
	}
	opts := moe.DefaultGenerateOptions()
	opts.MaxTokens = 64
	if len(os.Args) > 3 {
		n, err := strconv.Atoi(os.Args[3])
		if err != nil {
			fmt.Fprintln(os.Stderr, "MAX_TOKENS:", err)
			os.Exit(2)
		}
		opts.MaxTokens = n
	}
	if err := run(path, prompt, &opts); err != nil {
		if errors.Is(err, moe.ErrNotFound) {
			fmt.Fprintln(os.Stderr, "no model at", path)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(path, prompt string, opts *moe.GenerateOptions) error {
	model, err := moe.Load(path)
	if err != nil {
		return err
	}
	defer model.Close()
	ctx, err := model.NewContext(nil)
	if err != nil {
		return err
	}
	defer ctx.Close()

	fmt.Print(prompt)
	_, err = ctx.Generate(prompt, opts, func(token int32, piece string) bool {
		fmt.Print(piece)
		return true // false stops generation
	})
	fmt.Println()
	if err != nil {
		return err
	}
	st, err := ctx.Stats()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "[%d tokens, %.1f tok/s]\n", st.GeneratedTokens, st.GenerateTokensPerSecond)
	return nil
}
