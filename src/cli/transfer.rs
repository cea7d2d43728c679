//! Artifacts between the service and local files: `download` (chunked, continuing a
//! partial file, digest-checked) and `upload` (chunked, resumable by artifact id,
//! finalized with the file's digest), each with a byte progress bar. Transient failures
//! (the service unreachable or answering 503) are retried where the transfer stands.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

use super::args::{DownloadArgs, UploadArgs};
use super::exit::{CliError, CliResult, Exit};
use super::progress::{bytes, wanted};
use super::{Ctx, output};
use context_jobs::artifact::{
    ARTIFACT_UPLOAD_CHUNK_PATH, ARTIFACT_UPLOAD_FINALIZE_PATH, ARTIFACT_UPLOADS_PATH, ARTIFACTS_PATH,
    AppendUploadRequest, ArtifactDigest, ArtifactInfo, FinalizeUploadRequest, state,
};
use context_jobs::contract::{
    CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH, ContextExportArtifactChunk, GetContextExportArtifactChunkRequest,
};

/// The service's most bytes per chunk, either way.
const MAX_PIECE: usize = 4 * 1024 * 1024;
/// Tries of one request that fails transiently before the command gives up (resumable).
const TRIES: u32 = 5;

fn piece_size(requested: usize) -> CliResult<usize> {
    if requested == 0 || requested > MAX_PIECE {
        return Err(CliError::Usage(format!("--chunk-size must be 1..={MAX_PIECE} bytes")));
    }
    Ok(requested)
}

/// `call` again after a pause while it fails transiently.
async fn retrying<T, F, Fut>(mut call: F) -> CliResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = CliResult<T>>,
{
    let mut tries = 0;
    loop {
        match call().await {
            Err(e) if e.is_transient() && tries + 1 < TRIES => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250 << tries)).await;
            }
            other => return other,
        }
    }
}

/// Whether the file's first bytes (up to 4 KiB of its `have`) are the artifact's: a file
/// to continue must be a partial download of it. Checked before anything is written, so an
/// `-o` naming some other file leaves it as it was (it was continued, then failed the
/// digest with the artifact's tail appended to it).
async fn same_start(ctx: &Ctx, artifact: &str, file: &mut std::fs::File, have: u64) -> CliResult<bool> {
    let n = have.min(4096) as usize;
    let mut ours = vec![0; n];
    file.read_exact(&mut ours).map_err(CliError::io("cannot read the file to continue".to_string()))?;
    file.seek(SeekFrom::Start(0)).map_err(CliError::io("cannot seek the file to continue".to_string()))?;
    let request = GetContextExportArtifactChunkRequest { artifact_id: artifact.to_string(), offset: 0, limit: n };
    let chunk: ContextExportArtifactChunk =
        retrying(|| ctx.client.post(CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH, &request)).await?;
    let theirs = STANDARD
        .decode(chunk.data_base64.as_bytes())
        .map_err(|e| CliError::Api { status: 200, message: format!("a chunk that is not base64 ({e})") })?;
    Ok(theirs.len() == n && theirs == ours)
}

/// What `download --json` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Downloaded {
    artifact_id: String,
    path: String,
    size_bytes: u64,
    /// Bytes already in the file when the download started (a resumed one).
    resumed_from: u64,
    digest: String,
}

pub async fn download(ctx: &Ctx, args: &DownloadArgs) -> CliResult<Exit> {
    let piece = piece_size(args.chunk_size)?;
    let info: ArtifactInfo = ctx.client.get(&format!("{ARTIFACTS_PATH}/{}", args.artifact)).await?;
    if info.state != state::READY {
        return Err(CliError::Usage(format!(
            "artifact {} is {}; it can be downloaded once ready",
            info.id, info.state
        )));
    }
    let expected = info.digest.clone().unwrap_or_default();
    let out = &args.output;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(args.restart)
        .read(true)
        .write(true)
        .open(out)
        .map_err(CliError::io(format!("cannot open {}", out.display())))?;
    let have = file.metadata().map_err(CliError::io(format!("cannot read {}", out.display())))?.len();
    if have > info.size_bytes {
        return Err(CliError::Digest(format!(
            "{} has {have} bytes, more than artifact {} ({} bytes): not a partial download of it; use --restart",
            out.display(),
            info.id,
            info.size_bytes
        )));
    }
    if have > 0 && !same_start(ctx, &info.id, &mut file, have).await? {
        return Err(CliError::Digest(format!(
            "{} is not a partial download of artifact {}: its first bytes differ; nothing was written to it \
             (--restart overwrites it)",
            out.display(),
            info.id
        )));
    }
    // The digest covers the whole file: hash what is there, then go on from its end.
    let mut digest = ArtifactDigest::new();
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let n = file.read(&mut buffer).map_err(CliError::io(format!("cannot read {}", out.display())))?;
        if n == 0 {
            break;
        }
        digest.update(&buffer[..n]);
    }
    file.seek(SeekFrom::End(0)).map_err(CliError::io(format!("cannot seek {}", out.display())))?;
    if have > 0 && !ctx.json {
        output::note(format!("continuing {} at byte {have} of {}", out.display(), info.size_bytes));
    }
    let bar = bytes(wanted(ctx.json), &info.id, have, info.size_bytes);
    let mut offset = have;
    while offset < info.size_bytes {
        let request = GetContextExportArtifactChunkRequest { artifact_id: info.id.clone(), offset, limit: piece };
        let chunk: ContextExportArtifactChunk =
            retrying(|| ctx.client.post(CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH, &request)).await?;
        let data = STANDARD
            .decode(chunk.data_base64.as_bytes())
            .map_err(|e| CliError::Api { status: 200, message: format!("a chunk that is not base64 ({e})") })?;
        if data.is_empty() {
            break;
        }
        file.write_all(&data).map_err(CliError::io(format!("cannot write {}", out.display())))?;
        digest.update(&data);
        offset += data.len() as u64;
        bar.set_position(offset);
    }
    file.sync_all().map_err(CliError::io(format!("cannot write {}", out.display())))?;
    bar.finish_and_clear();
    let got = digest.finish();
    if got != expected {
        return Err(CliError::Digest(format!(
            "{} does not match artifact {}: its digest is {got}, the artifact's {expected} (a partial file that was \
             not this artifact's? download again with --restart)",
            out.display(),
            info.id
        )));
    }
    let done = Downloaded {
        artifact_id: info.id,
        path: out.display().to_string(),
        size_bytes: offset,
        resumed_from: have,
        digest: got,
    };
    if ctx.json {
        output::json(&done);
    } else {
        println!("{}  {} bytes  {}  (digest verified)", done.path, done.size_bytes, done.digest);
    }
    Ok(Exit::Ok)
}

pub async fn upload(ctx: &Ctx, args: &UploadArgs) -> CliResult<Exit> {
    let info = upload_file(ctx, &args.file, args.artifact.as_deref(), args.chunk_size).await?;
    if ctx.json {
        output::json(&info);
    } else {
        println!("{}", info.id);
    }
    Ok(Exit::Ok)
}

/// Upload `path` (continuing upload `resume` when given); the sealed artifact.
pub async fn upload_file(ctx: &Ctx, path: &Path, resume: Option<&str>, chunk_size: usize) -> CliResult<ArtifactInfo> {
    let piece = piece_size(chunk_size)?;
    let open = || std::fs::File::open(path).map_err(CliError::io(format!("cannot open {}", path.display())));
    let mut file = open()?;
    let size = file.metadata().map_err(CliError::io(format!("cannot read {}", path.display())))?.len();
    // The digest first: finalize checks what the service received against it.
    let mut digest = ArtifactDigest::new();
    let mut buffer = vec![0; piece];
    loop {
        let n = file.read(&mut buffer).map_err(CliError::io(format!("cannot read {}", path.display())))?;
        if n == 0 {
            break;
        }
        digest.update(&buffer[..n]);
    }
    let digest = digest.finish();
    let mut info: ArtifactInfo = match resume {
        Some(id) => ctx.client.get(&format!("{ARTIFACTS_PATH}/{id}")).await?,
        None => ctx.client.post(ARTIFACT_UPLOADS_PATH, &serde_json::Map::new()).await?,
    };
    if info.state == state::READY && info.digest.as_deref() == Some(digest.as_str()) {
        return Ok(info);
    }
    if info.state != state::UPLOADING {
        return Err(CliError::Usage(format!("artifact {} is {}, not an unfinished upload", info.id, info.state)));
    }
    if info.size_bytes > size {
        return Err(CliError::Digest(format!(
            "upload {} already holds {} bytes, more than {} has ({size})",
            info.id,
            info.size_bytes,
            path.display()
        )));
    }
    if !ctx.json {
        output::note(format!(
            "uploading {} to artifact {} (resume with --artifact {})",
            path.display(),
            info.id,
            info.id
        ));
    }
    let bar = bytes(wanted(ctx.json), &info.id, info.size_bytes, size);
    let mut offset = info.size_bytes;
    file.seek(SeekFrom::Start(offset)).map_err(CliError::io(format!("cannot seek {}", path.display())))?;
    while offset < size {
        let n = file.read(&mut buffer).map_err(CliError::io(format!("cannot read {}", path.display())))?;
        if n == 0 {
            break;
        }
        let request =
            AppendUploadRequest { artifact_id: info.id.clone(), offset, data_base64: STANDARD.encode(&buffer[..n]) };
        info = retrying(|| ctx.client.post(ARTIFACT_UPLOAD_CHUNK_PATH, &request)).await?;
        offset += n as u64;
        bar.set_position(offset);
    }
    bar.finish_and_clear();
    let finalize = FinalizeUploadRequest { artifact_id: info.id.clone(), digest: digest.clone() };
    match retrying(|| ctx.client.post(ARTIFACT_UPLOAD_FINALIZE_PATH, &finalize)).await {
        Ok(info) => Ok(info),
        // The service hashed other bytes than the file's: a resumed upload of another file.
        Err(CliError::Api { status: 400, message }) if message.contains("digest") => {
            Err(CliError::Digest(format!("upload {} does not match {} ({digest}): {message}", info.id, path.display())))
        }
        Err(e) => Err(e),
    }
}
