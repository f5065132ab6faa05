package moe

import (
	"runtime"

	"github.com/libmoe/moe/internal/raw"
)

// ChatMessage is one message of a conversation for ApplyChatTemplate.
type ChatMessage struct {
	Role    string // "system", "user" or "assistant"
	Content string
}

// ApplyChatTemplate formats a conversation with the model's own chat template. With
// addGenerationPrompt the text ends where the assistant's reply begins. BOS is not included
// (generation adds it); generate from the result with GenerateOptions.ParseSpecial set. A model
// without a template gives an error matching ErrNotFound: name one with ApplyNamedChatTemplate.
func (m *Model) ApplyChatTemplate(messages []ChatMessage, addGenerationPrompt bool) (string, error) {
	return m.ApplyNamedChatTemplate("", messages, addGenerationPrompt)
}

// ApplyNamedChatTemplate formats a conversation with a named template: "chatml", "llama3",
// "mistral", "llama2", "zephyr", "deepseek", "plain", "chatglm4", "deepseek3", "gpt-oss",
// "ernie4.5", "granite" or "llama4" ("" means the model's own). An unknown name or role is an error.
func (m *Model) ApplyNamedChatTemplate(name string, messages []ChatMessage,
	addGenerationPrompt bool) (text string, err error) {
	chat := raw.NewNativeChat()
	defer raw.DeleteNativeChat(chat)
	for _, msg := range messages {
		chat.Add(msg.Role, msg.Content)
	}
	err = m.with(func(n raw.NativeModel) error {
		return call(func() { text = n.ApplyChatTemplate(chat, name, addGenerationPrompt) })
	})
	return text, err
}

// Detokenizer turns tokens that arrive one at a time into text, holding back the bytes of a
// character split across tokens until it is complete, so every piece is whole UTF-8. Use it from
// one goroutine at a time and Close it when done.
type Detokenizer struct {
	h handle[raw.NativeDetokenizer]
}

// NewDetokenizer returns a streaming detokenizer over the model's vocabulary.
func (m *Model) NewDetokenizer() (*Detokenizer, error) {
	var native raw.NativeDetokenizer
	err := m.with(func(n raw.NativeModel) error {
		return call(func() { native = raw.NewNativeDetokenizer(n) })
	})
	if err != nil {
		if native != nil {
			raw.DeleteNativeDetokenizer(native)
		}
		return nil, err
	}
	d := &Detokenizer{h: handle[raw.NativeDetokenizer]{native: native}}
	runtime.SetFinalizer(d, func(d *Detokenizer) { raw.DeleteNativeDetokenizer(d.h.native) })
	return d, nil
}

// Push returns the text token completes, possibly "" (an incomplete character). An id outside
// the vocabulary is an error matching ErrOutOfRange.
func (d *Detokenizer) Push(token int32) (text string, err error) {
	n, err := d.h.get()
	if err != nil {
		return "", err
	}
	err = call(func() { text = n.Push(int(token)) })
	runtime.KeepAlive(d)
	if err != nil {
		return "", err
	}
	return text, nil
}

// Close releases the detokenizer. Every later call, a second Close too, returns ErrClosed.
func (d *Detokenizer) Close() error {
	n, err := d.h.close()
	if err != nil {
		return err
	}
	err = call(n.Close)
	runtime.KeepAlive(d)
	return err
}
