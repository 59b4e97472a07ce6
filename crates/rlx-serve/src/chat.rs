//! Chat prompts: the GGUF's `tokenizer.chat_template` is recognized by its markers rather than
//! run as Jinja (no template engine): ChatML (Qwen, `<|im_start|>`) and Llama 3
//! (`<|start_header_id|>`) cover the models RLX loads. Any other template, or none, takes the
//! plain fallback, one `role: content` line per message and then `assistant:`.

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant` (or any other role name the client sends).
    pub role: String,
    /// The text.
    pub content: String,
}

/// The prompt format a model is served with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatFormat {
    /// `<|im_start|>role\ncontent<|im_end|>\n` ..., then `<|im_start|>assistant\n`.
    ChatMl,
    /// `<|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>` ...
    Llama3,
    /// `role: content` lines, then `assistant:`; generation also stops at a new `\nuser:` line.
    Plain,
}

impl ChatFormat {
    /// The format a GGUF chat template (if any) stands for.
    pub fn detect(template: Option<&str>) -> Self {
        match template {
            Some(t) if t.contains("<|im_start|>") => ChatFormat::ChatMl,
            Some(t) if t.contains("<|start_header_id|>") => ChatFormat::Llama3,
            _ => ChatFormat::Plain,
        }
    }

    /// The name shown in logs.
    pub fn name(self) -> &'static str {
        match self {
            ChatFormat::ChatMl => "chatml",
            ChatFormat::Llama3 => "llama3",
            ChatFormat::Plain => "plain",
        }
    }

    /// The prompt text; special-token text in it (`<|im_start|>`) is to be encoded as the
    /// control tokens themselves (`LlmTokenizer::encode_special`).
    pub fn render(self, messages: &[Message]) -> String {
        let mut s = String::new();
        match self {
            ChatFormat::ChatMl => {
                for m in messages {
                    s += &format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
                }
                s += "<|im_start|>assistant\n";
            }
            ChatFormat::Llama3 => {
                s += "<|begin_of_text|>";
                for m in messages {
                    s += &format!("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", m.role, m.content.trim());
                }
                s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            }
            ChatFormat::Plain => {
                for m in messages {
                    s += &format!("{}: {}\n", m.role, m.content);
                }
                s += "assistant:";
            }
        }
        s
    }

    /// Token texts that end an assistant turn besides the model's EOS token.
    pub fn end_tokens(self) -> &'static [&'static str] {
        match self {
            ChatFormat::ChatMl => &["<|im_end|>", "<|endoftext|>"],
            ChatFormat::Llama3 => &["<|eot_id|>", "<|end_of_text|>"],
            ChatFormat::Plain => &[],
        }
    }

    /// Stop strings that end an assistant turn (the plain format has no end token).
    pub fn stop_strings(self) -> &'static [&'static str] {
        match self {
            ChatFormat::Plain => &["\nuser:"],
            _ => &[],
        }
    }

    /// Whether the rendered prompt already holds BOS (Llama 3 writes `<|begin_of_text|>`).
    pub fn has_bos(self) -> bool {
        self == ChatFormat::Llama3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs() -> Vec<Message> {
        vec![
            Message { role: "system".into(), content: "Be brief.".into() },
            Message { role: "user".into(), content: "Hi".into() },
        ]
    }

    #[test]
    fn templates_are_recognized_by_their_markers() {
        let qwen = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}...";
        let llama3 = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}";
        assert_eq!(ChatFormat::detect(Some(qwen)), ChatFormat::ChatMl);
        assert_eq!(ChatFormat::detect(Some(llama3)), ChatFormat::Llama3);
        assert_eq!(ChatFormat::detect(Some("[INST] {{ m }} [/INST]")), ChatFormat::Plain);
        assert_eq!(ChatFormat::detect(None), ChatFormat::Plain);
    }

    #[test]
    fn each_format_renders_the_turns_and_opens_the_assistant_turn() {
        assert_eq!(
            ChatFormat::ChatMl.render(&msgs()),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            ChatFormat::Llama3.render(&msgs()),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(ChatFormat::Plain.render(&msgs()), "system: Be brief.\nuser: Hi\nassistant:");
    }
}
